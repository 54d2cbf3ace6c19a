"""The publish sensor's logic, without Dagster: detect changes, micro-batch, decide runs.

The cursor stays small at any corpus size: `{"v": 2, "ref": <digest>, "n": <ticks that changed
it>, "listed": <when the source was last looked at>, "due": <when the waiting batch's window
closes>, "waiting": <documents waiting>}` (the last two only while something waits). What it
refers to, the source's change state and the changes pending, is a gzipped JSON
file in staging named by its digest (`StateSnapshots`); a new file is written only when they
changed, and the previous one is kept until the cursor has moved on, so a tick that fails after
writing loses nothing. A lost file, or an unreadable cursor, resets: from the tracking store's
landed versions when it knows the collection, else with a full reconciliation run. Cursors of
the older format (state inline) are read and upgraded.

Changes are batched: a run starts on the first tick at least `window_seconds` after the oldest
pending change happened (its mtime, LastModified or updated-at where the source has one, else
when the sensor saw it), or once `max_docs` documents are pending; at most `max_docs` a run.
A source that cannot be reached leaves the cursor as it was.

Looking at the source (listing a folder or a bucket, querying a table) and launching are timed
apart: the sensor ticks every few seconds, but it looks at the source only every
`interval_seconds`, or when a batch's window has closed (`skip_without_looking` decides from
the cursor alone). So a run starts within a tick of its window closing, however seldom the
source is looked at.
"""

import gzip
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from batch_pipeline.config import CollectionConfig
from batch_pipeline.iterables import batched
from batch_pipeline.sources import ChangeSet, DocumentSource, SourceUnavailableError
from batch_pipeline.sources.base import LOOK_SECONDS
from batch_pipeline.state.staging import StagePath

CURSOR_VERSION = 2
TICK_SECONDS = 1  # the sensor's minimum interval: every evaluation of the daemon (every 5 s)
LOOK_SLACK_SECONDS = 1.0  # ticks drift by a fraction of a second; a look is not put off a tick


class StateSnapshots:
    """Source states too big for a cursor, as gzipped JSON files named by their digest."""

    def __init__(self, folder: StagePath) -> None:
        self.folder = folder

    def save(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self.folder / f"{digest}.json.gz"
        if not path.is_file():
            path.write_bytes(gzip.compress(data, compresslevel=6))
        return digest

    def load(self, digest: str) -> dict | None:
        path = self.folder / f"{digest}.json.gz"
        try:
            state = json.loads(gzip.decompress(path.read_bytes()))
        except (OSError, ValueError, EOFError):
            return None
        return state if isinstance(state, dict) else None

    def prune(self, keep: set[str]) -> None:
        for info in self.folder.files():
            if info.base_name.removesuffix(".json.gz") not in keep:
                self.folder.child(info).delete()


@dataclass(frozen=True)
class PlannedRun:
    run_key: str
    changed_doc_ids: list[str]
    deleted_doc_ids: list[str]

    @property
    def full(self) -> bool:
        return not (self.changed_doc_ids or self.deleted_doc_ids)


@dataclass(frozen=True)
class PartitionRun:
    """One run request: a planned run's share of one partition."""

    partition: str
    run_key: str
    changed_doc_ids: list[str]
    deleted_doc_ids: list[str]
    full: bool


def partition_runs(run: PlannedRun, collection: CollectionConfig) -> list[PartitionRun]:
    """The run requests a planned run becomes: one per partition whose documents it touches
    (every partition for a full run). Run keys stay stable per partition."""
    partitions = collection.partition_keys()

    def key(partition: str) -> str:
        return run.run_key if len(partitions) == 1 else f"{run.run_key}:{partition}"

    if run.full:
        return [PartitionRun(p, key(p), [], [], True) for p in partitions]
    changed: dict[str, list[str]] = {p: [] for p in partitions}
    deleted: dict[str, list[str]] = {p: [] for p in partitions}
    for doc_id in run.changed_doc_ids:
        changed[collection.partition_of(doc_id)].append(doc_id)
    for doc_id in run.deleted_doc_ids:
        deleted[collection.partition_of(doc_id)].append(doc_id)
    return [
        PartitionRun(p, key(p), changed[p], deleted[p], False)
        for p in partitions
        if changed[p] or deleted[p]
    ]


@dataclass
class PublishDecision:
    cursor: str | None
    runs: list[PlannedRun] = field(default_factory=list)
    skip_reason: str | None = None
    pending_changes: dict[str, float | None] = field(default_factory=dict)  # doc id -> time
    cursor_reset: bool = False


def _parse(cursor: str | None, snapshots: StateSnapshots | None) -> dict | None:
    """The state and pending changes a cursor refers to (None: start over)."""
    if not cursor:
        return None
    try:
        data = json.loads(cursor)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("v") not in (1, CURSOR_VERSION):
        return None
    if data.get("v") == CURSOR_VERSION and isinstance(data.get("ref"), str):
        if snapshots is None:
            return None
        data = {**(snapshots.load(data["ref"]) or {}), "ref": data["ref"], "n": data.get("n", 0)}
    elif isinstance(data.get("state_ref"), str) and snapshots is not None:  # format 1
        data["state"] = snapshots.load(data["state_ref"])
    if not isinstance(data.get("state"), dict) or not isinstance(data.get("pending"), dict):
        return None
    if not isinstance(data.get("ack", []), list):
        return None
    return data


def _cursor(
    state: dict,
    pending: dict,
    previous: dict | None,
    snapshots,  # noqa: ANN001
    timing: dict,
    ack: list[str] | None = None,
) -> str:
    """The next cursor: a digest of the state, the pending changes and the change-feed
    messages to acknowledge next tick, a tick counter, and the `timing` that lets a tick
    skip without looking; the rest goes to a snapshot file (inline only without a snapshot
    folder)."""
    body = {"state": state, "pending": pending, **({"ack": ack} if ack else {})}
    if snapshots is None:
        return json.dumps({"v": CURSOR_VERSION, **body, **timing})
    digest = snapshots.save(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    before = (previous or {}).get("ref")
    counter = int((previous or {}).get("n", 0)) + (digest != before)
    snapshots.prune({digest, before} if isinstance(before, str) else {digest})
    cursor = {"v": CURSOR_VERSION, "ref": digest, "n": counter, **timing}
    return json.dumps(cursor, separators=(",", ":"))


def _timing(now: float, pending: dict, window_seconds: float) -> dict:
    """When the source was looked at, and when the waiting batch (if any) is due."""
    timing: dict = {"listed": round(now, 1)}
    oldest = oldest_change(pending)
    if oldest is not None:
        timing["due"] = math.ceil((oldest + window_seconds) * 10) / 10  # never early
        timing["waiting"] = len(pending)
    return timing


def skip_without_looking(cursor: str | None, now: float, interval_seconds: float) -> str | None:
    """Why this tick can skip without looking at the source: it was looked at less than
    `interval_seconds` ago and no waiting batch is due. None: look now (also for a first
    tick, a cursor of an older format or one that cannot be read)."""
    try:
        data = json.loads(cursor) if cursor else None
        listed = float(data["listed"])
        due = float(data["due"]) if "due" in data else None
        waiting = int(data.get("waiting", 0))
    except (TypeError, ValueError, KeyError):
        return None
    next_look = listed + interval_seconds - LOOK_SLACK_SECONDS
    if now >= next_look or (due is not None and now >= due):
        return None
    if due is not None:
        return (
            f"{_documents(waiting)} waiting for the batching window; the run starts on the "
            f"first tick after {due - now:.1f} s"
        )
    return (
        f"no source changes at the last look, {now - listed:.0f} s ago; "
        f"the next look is in {listed + interval_seconds - now:.0f} s"
    )


def _documents(count: int) -> str:
    return f"{count} changed document" + ("" if count == 1 else "s")


def _key(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


def evaluate_publish(
    collection: str,
    source: DocumentSource,
    cursor: str | None,
    now: float,
    window_seconds: float,
    max_docs: int,
    snapshots: StateSnapshots | None = None,
    landed: Callable[[], Iterable[tuple[str, str]]] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> PublishDecision:
    """What this tick does. `landed` streams (doc id, source version) of what tracking
    records as landed; with it, a first tick (or a reset) turns only what differs into
    targeted runs instead of a full reconciliation run; it is read only once the source
    answered. `clock` times a reset's listing of a source with a change feed (`LOOK_SECONDS`)."""
    previous = _parse(cursor, snapshots)
    reset = previous is None and cursor is not None
    # on a first tick, or a cursor that cannot be read: what tracking landed (`known`), read
    # once the source answered (a tick whose source is unreachable has no use for it)
    first = previous is None and landed is not None
    baseline = source.baseline_state() if previous is None else None
    try:
        if baseline is not None:  # a change feed: later ticks read it, this one need not list
            source.check()
            known = dict(landed()) if first else {}
            changes = _listed_within(source, baseline, clock) if known else None
            if changes is None:  # the full run lists the source, not the tick
                return _full_run(collection, baseline, snapshots, now, reset)
        else:
            # the cursor that named these messages was committed: their runs are requested
            source.acknowledge(previous.get("ack", []) if previous else [])
            # the previous state is let go once compared: a look holds one state, not two
            changes = source.changes_since(previous.pop("state") if previous else None)
            known = dict(landed()) if first else {}
    except SourceUnavailableError as error:
        return PublishDecision(cursor=cursor, skip_reason=f"source unavailable: {error}")

    if previous is None:
        if not known:  # tracking does not know the collection: a full reconciliation run
            return _full_run(collection, changes.state, snapshots, now, reset)
        listed = {entry.doc_id for entry in changes.changed} | set(changes.deleted)
        changes.changed = [e for e in changes.changed if known.get(e.doc_id) != e.version]
        changes.deleted = sorted(set(changes.deleted) | (set(known) - listed))
        previous = {"state": {}, "pending": {}}

    pending: dict = previous["pending"]

    def receipts(doc_id: str) -> dict:
        """The feed messages carrying this document's pending change (none without a feed)."""
        held = pending.get(doc_id, {}).get("receipts", []) + changes.receipts.get(doc_id, [])
        return {"receipts": held} if held else {}

    for entry in changes.changed:
        first_seen = pending.get(entry.doc_id, {}).get("seen_at", now)
        pending[entry.doc_id] = {
            "version": entry.version,
            "deleted": False,
            "changed_at": entry.changed_at,
            "seen_at": first_seen,
            **receipts(entry.doc_id),
        }
    for doc_id in changes.deleted:
        first_seen = pending.get(doc_id, {}).get("seen_at", now)
        pending[doc_id] = {
            "version": "",
            "deleted": True,
            "changed_at": now,
            "seen_at": first_seen,
            **receipts(doc_id),
        }
    found = {
        d: pending[d]["changed_at"] for d in [e.doc_id for e in changes.changed] + changes.deleted
    }

    decision = PublishDecision(cursor=None, pending_changes=found, cursor_reset=reset)
    oldest = oldest_change(pending)
    due = oldest is not None and (now - oldest >= window_seconds or len(pending) >= max_docs)
    ack = list(changes.ignorable)  # acknowledged next tick, once this cursor is committed
    if due:
        ack += [r for change in pending.values() for r in change.get("receipts", [])]
        for batch in batched(sorted(pending), max_docs):
            signature = [f"{d}@{pending[d]['version']}" for d in batch]
            decision.runs.append(
                PlannedRun(
                    run_key=f"{collection}:{_key(collection, *signature)}",
                    changed_doc_ids=[d for d in batch if not pending[d]["deleted"]],
                    deleted_doc_ids=[d for d in batch if pending[d]["deleted"]],
                )
            )
        pending = {}
    elif pending:
        wait = max(0.1, window_seconds - (now - oldest))
        decision.skip_reason = (
            f"{_documents(len(pending))} waiting for the {window_seconds:g} s batching window; "
            f"the run starts on the first tick after {wait:.1f} s"
        )
    else:
        decision.skip_reason = "no source changes"
    timing = _timing(now, pending, window_seconds)
    decision.cursor = _cursor(changes.state, pending, previous, snapshots, timing, ack)
    return decision


def _listed_within(
    source: DocumentSource, baseline: dict, clock: Callable[[], float]
) -> ChangeSet | None:
    """Every document of a source with a change feed, listed as a first look lists it, or
    None where the listing takes longer than `LOOK_SECONDS` (the full run lists it then)."""
    until = clock() + LOOK_SECONDS
    listed = ChangeSet(state=baseline)
    for entry in source.list_entries():
        if clock() > until:
            return None
        listed.changed.append(entry)
    return listed


def _full_run(
    collection: str,
    state: dict,
    snapshots,  # noqa: ANN001
    now: float,
    reset: bool,
) -> PublishDecision:
    """A full reconciliation run, the cursor starting from `state`.

    Its run key names the tick's time as well as the state: a sensor starts over with a full
    run only when tracking knows nothing landed, and each such start needs its run, even where
    the listing is what it was at an earlier start (tracking lost or wiped since) or the state
    is a change feed's, which is the same every time. A key of the state alone would be one
    Dagster already launched for this sensor, and it would skip the run without a word."""
    state_key = _key(collection, "full", json.dumps(state, sort_keys=True), repr(now))
    return PublishDecision(
        cursor=_cursor(state, {}, None, snapshots, _timing(now, {}, 0)),
        runs=[PlannedRun(f"{collection}:full:{state_key}", [], [])],
        cursor_reset=reset,
    )


def oldest_change(pending: dict) -> float | None:
    """When the oldest pending change happened: the source's own time of the change where it
    has one (never later than when the sensor saw it), else when the sensor saw it."""
    times = [
        min(p["changed_at"], p["seen_at"]) if p.get("changed_at") else p["seen_at"]
        for p in pending.values()
    ]
    return min(times, default=None)
