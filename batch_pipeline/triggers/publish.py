"""The publish sensor's logic, without Dagster: detect changes, micro-batch, decide runs.

The cursor is JSON: `{"v": 1, "state": <the source's change state>, "pending": {...}}`.
Changes seen within `window_seconds` of the first pending one go into one run; at most
`max_docs` documents per run. A source that cannot be reached leaves the cursor as it was.
A missing or unreadable cursor starts over with a full reconciliation run.

A listing source's state holds one entry per document, so for a big corpus it is kept out of
the cursor: past `INLINE_STATE_BYTES` it is written to a content-addressed file in staging
(`StateSnapshots`) and the cursor holds only its digest (`"state_ref"`). A new file is written
only when the state changed, and the previous one is kept until the cursor has moved on, so a
tick that fails after writing loses nothing. A missing snapshot resets like a bad cursor.
"""

import gzip
import hashlib
import json
from dataclasses import dataclass, field

from batch_pipeline.config import CollectionConfig
from batch_pipeline.iterables import batched
from batch_pipeline.sources import DocumentSource, SourceUnavailableError
from batch_pipeline.state.staging import StagePath

CURSOR_VERSION = 1
INLINE_STATE_BYTES = 64 * 1024  # larger source states go to a snapshot file


class StateSnapshots:
    """Source states too big for a cursor, as gzipped JSON files named by their digest."""

    def __init__(self, folder: StagePath) -> None:
        self.folder = folder

    def save(self, text: str) -> str:
        digest = hashlib.sha256(text.encode()).hexdigest()
        path = self.folder / f"{digest}.json.gz"
        if not path.is_file():
            path.write_bytes(gzip.compress(text.encode(), compresslevel=6))
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
    if not cursor:
        return None
    try:
        data = json.loads(cursor)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION:
        return None
    if isinstance(data.get("state_ref"), str) and snapshots is not None:
        data["state"] = snapshots.load(data["state_ref"])
    if not isinstance(data.get("state"), dict) or not isinstance(data.get("pending"), dict):
        return None
    return data


def _cursor(state: dict, pending: dict, previous: dict | None, snapshots) -> str:  # noqa: ANN001
    """The next cursor, with the state inline or, when big, in a snapshot file."""
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    if snapshots is None or len(text) <= INLINE_STATE_BYTES:
        return json.dumps({"v": CURSOR_VERSION, "state": state, "pending": pending})
    digest = snapshots.save(text)
    before = (previous or {}).get("state_ref")
    snapshots.prune({digest, before} if isinstance(before, str) else {digest})
    return json.dumps({"v": CURSOR_VERSION, "state_ref": digest, "pending": pending})


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
) -> PublishDecision:
    previous = _parse(cursor, snapshots)
    try:
        changes = source.changes_since(previous["state"] if previous else None)
    except SourceUnavailableError as error:
        return PublishDecision(cursor=cursor, skip_reason=f"source unavailable: {error}")

    if previous is None:  # first tick, or a cursor from an older version: start over
        new_cursor = _cursor(changes.state, {}, None, snapshots)
        state_key = _key(collection, "full", json.dumps(changes.state, sort_keys=True))
        return PublishDecision(
            cursor=new_cursor,
            runs=[PlannedRun(f"{collection}:full:{state_key}", [], [])],
            cursor_reset=cursor is not None,
        )

    pending: dict = previous["pending"]
    for entry in changes.changed:
        first_seen = pending.get(entry.doc_id, {}).get("seen_at", now)
        pending[entry.doc_id] = {
            "version": entry.version,
            "deleted": False,
            "changed_at": entry.changed_at,
            "seen_at": first_seen,
        }
    for doc_id in changes.deleted:
        first_seen = pending.get(doc_id, {}).get("seen_at", now)
        pending[doc_id] = {"version": "", "deleted": True, "changed_at": now, "seen_at": first_seen}
    found = {
        d: pending[d]["changed_at"] for d in [e.doc_id for e in changes.changed] + changes.deleted
    }

    decision = PublishDecision(cursor=None, pending_changes=found)
    oldest_seen = min((p["seen_at"] for p in pending.values()), default=None)
    due = oldest_seen is not None and (
        now - oldest_seen >= window_seconds or len(pending) >= max_docs
    )
    if due:
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
        wait = window_seconds - (now - oldest_seen)
        decision.skip_reason = f"{len(pending)} changed documents pending; run in {wait:.0f}s"
    else:
        decision.skip_reason = "no source changes"
    decision.cursor = _cursor(changes.state, pending, previous, snapshots)
    return decision
