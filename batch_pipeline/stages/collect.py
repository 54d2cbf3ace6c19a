"""Stage 1, collect: list the source, read what may have changed, classify every document.

A document whose source version (mtime+size, ETag, updated-at) and model fingerprint match
what landed is `unchanged` without being read. Others are read and hashed: `new`, `changed`,
or `unchanged` after all (touched but identical). Landed documents missing from the source are
`deleted`. A document that cannot be read or decoded is `failed`, with its reason.
"""

import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from batch_pipeline.iterables import ID_BATCH, batched
from batch_pipeline.sources import (
    DocumentReadError,
    DocumentSource,
    ListingGap,
    RawDocument,
    SourceEntry,
)
from batch_pipeline.sources.reading import read_document, too_large
from batch_pipeline.state.spill import BucketSpill, bucket_count, hash_buckets
from batch_pipeline.state.staging import StageWriter, stamped_collect_schema
from batch_pipeline.state.tracking import (
    UNLISTABLE,
    UNREACHABLE,
    FailureRecord,
    LandedDocument,
    TrackingStore,
    is_quarantined,
)
from batch_pipeline.text.documents import DocumentError

NEW, CHANGED, UNCHANGED, DELETED = "new", "changed", "unchanged", "deleted"
FAILED, QUARANTINED = "failed", "quarantined"
STATUSES = (NEW, CHANGED, UNCHANGED, DELETED, FAILED, QUARANTINED)

COLLECTED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("source_version", pa.string()),
        pa.field("content_hash", pa.string()),
        pa.field("title", pa.string()),
        pa.field("format", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("source_changed_at", pa.float64()),
        pa.field("text", pa.large_string()),
        pa.field("source_metadata", pa.string()),  # JSON: S3 object metadata, SQL columns
        pa.field("error_reason", pa.string()),
        pa.field("error_message", pa.string()),
    ]
)
ID_SCHEMA = pa.schema([("doc_id", pa.string())])  # spilled: ids seen at the source
LANDED_SCHEMA = pa.schema([("doc_id", pa.string()), ("content_hash", pa.string())])


@dataclass
class CollectSummary:
    """What collect found. New, changed and deleted ids (with their change time) gather in
    `changes`; with `on_changes`, they are handed over a batch at a time instead of kept."""

    counts: Counter = field(default_factory=Counter)
    failures: list[FailureRecord] = field(default_factory=list)
    bytes_read: int = 0
    changes: dict[str, float | None] = field(default_factory=dict)
    on_changes: Callable[[dict[str, float | None]], None] | None = None
    gaps: list[ListingGap] = field(default_factory=list)  # what the listing could not see

    def add_change(self, doc_id: str, changed_at: float | None) -> None:
        self.changes[doc_id] = changed_at
        if self.on_changes is not None and len(self.changes) >= LOOKUP_BATCH:
            self.flush_changes()

    def flush_changes(self) -> None:
        if self.on_changes is not None and self.changes:
            self.on_changes(self.changes)
            self.changes = {}

    def metadata(self) -> dict[str, object]:
        values: dict[str, object] = {
            f"documents_{status}": self.counts.get(status, 0) for status in STATUSES
        }
        if self.gaps:  # left out when the whole source could be listed
            values["unlisted"] = [gap.prefix for gap in self.gaps]
        return values


@dataclass(frozen=True)
class CollectLimits:
    max_document_bytes: int = 8 * 1024 * 1024
    quarantine_after_failures: int = 3


MAX_DOC_ID_LENGTH = 1024
LOOKUP_BATCH = ID_BATCH  # source entries classified per tracking lookup
DELETION_BUCKET_DOCS = 16384  # landed documents per bucket when finding deletions


class LandedDocuments:
    """A partition's landed documents as collect sees them, fetched a batch at a time.

    `owns` keeps one shard's documents; `drifted` ones (whose index rows do not match
    tracking) count as not landed, so they are prepared again.
    """

    def __init__(
        self,
        tracking: TrackingStore,
        index: str,
        owns: Callable[[str], bool] = lambda doc_id: True,
        drifted: Iterable[str] = (),
    ) -> None:
        self.tracking = tracking
        self.index = index
        self.owns = owns
        self.drifted = frozenset(drifted)

    def _keeps(self, doc_id: str) -> bool:
        return doc_id not in self.drifted and self.owns(doc_id)

    def lookup(self, doc_ids: list[str]) -> dict[str, LandedDocument]:
        found = self.tracking.landed_documents(self.index, doc_ids)
        return {d: doc for d, doc in found.items() if self._keeps(d)}

    def pages(self) -> Iterator[list[tuple[str, str]]]:
        """(doc_id, content_hash) of every landed document, a page at a time."""
        for page in self.tracking.iter_documents(self.index, ["doc_id", "content_hash"]):
            yield [(doc_id, digest) for doc_id, digest in page if self._keeps(doc_id)]

    def count(self) -> int:
        return self.tracking.document_count(self.index)


class _Collector:
    """Classifies entries against what landed and what failed before."""

    def __init__(
        self,
        source: DocumentSource,
        fingerprint: str,
        summary: CollectSummary,
        known_failures: dict[str, dict],
        limits: CollectLimits,
    ) -> None:
        self.source = source
        self.landed: dict[str, LandedDocument] = {}  # of the entries being classified
        self.fingerprint = fingerprint
        self.summary = summary
        self.known_failures = known_failures
        self.limits = limits

    def _count(self, row: dict) -> dict:
        self.summary.counts[row["status"]] += 1
        if row["status"] in (NEW, CHANGED):
            self.summary.add_change(row["doc_id"], row["source_changed_at"])
        return row

    def _quarantined(self, doc_id: str, version: str | None, digest: str | None) -> bool:
        """Failed too often, and its content has not changed since (same version or hash)."""
        failure = self.known_failures.get(doc_id)
        if failure is None or not is_quarantined(failure, self.limits.quarantine_after_failures):
            return False
        same_version = version is not None and failure.get("source_version") == version
        same_content = digest is not None and failure.get("content_hash") == digest
        return same_version or same_content

    def without_reading(self, entry: SourceEntry) -> dict | None:
        """A row for entries that need no read, or None."""
        previous = self.landed.get(entry.doc_id)
        if (
            previous is not None
            and previous.source_version == entry.version
            and previous.fingerprint == self.fingerprint
        ):
            return _row(entry, status=UNCHANGED, content_hash=previous.content_hash)
        if "\x00" in entry.doc_id or len(entry.doc_id) > MAX_DOC_ID_LENGTH:
            error = DocumentError("invalid_doc_id", "the doc id holds NUL or is over 1024 chars")
            return _row(entry, **self._failed(entry, error.reason, error, None))
        if self._quarantined(entry.doc_id, entry.version, None):
            return _row(entry, status=QUARANTINED)
        if entry.size is not None and entry.size > self.limits.max_document_bytes:
            return _row(entry, **self._too_large(entry, entry.size, None))
        return None

    def _too_large(self, entry: SourceEntry, size: int, digest: str | None) -> dict:
        error = too_large(size, self.limits.max_document_bytes)
        return self._failed(entry, error.reason, error, digest)

    def read(self, entries: list[SourceEntry]) -> Iterator[dict]:
        by_id = {entry.doc_id: entry for entry in entries}
        for doc_id, result in self.source.read_many(list(by_id)):
            entry = by_id[doc_id]
            if isinstance(result, RawDocument) and result.version not in (None, entry.version):
                entry = replace(entry, version=result.version)  # replaced since it was listed
            yield self._count(_row(entry, **self._classify(entry, result)))

    def _classify(self, entry: SourceEntry, result: RawDocument | DocumentReadError) -> dict:
        doc_id = entry.doc_id
        if isinstance(result, DocumentReadError):
            reason = UNREACHABLE if result.transient else "unreadable"
            return self._failed(entry, reason, result, None)
        self.summary.bytes_read += len(result.data)
        read = read_document(doc_id, result, self.limits.max_document_bytes)
        if self._quarantined(doc_id, None, read.digest):
            return {"status": QUARANTINED, "content_hash": read.digest}
        if read.error is not None:
            return self._failed(entry, read.reason, read.error, read.digest)
        previous = self.landed.get(doc_id)
        if (
            previous
            and previous.content_hash == read.digest
            and previous.fingerprint == self.fingerprint
        ):
            return {"status": UNCHANGED, "content_hash": read.digest}
        return {
            "status": NEW if previous is None else CHANGED,
            "content_hash": read.digest,
            "title": read.title(),
            "format": read.fmt,
            "text": read.text,
            "source_metadata": read.metadata,
        }

    def _failed(
        self, entry: SourceEntry, reason: str, error: Exception, digest: str | None
    ) -> dict:
        self.summary.failures.append(
            FailureRecord(
                entry.doc_id,
                "collect",
                reason,
                type(error).__name__,
                str(error),
                digest,
                entry.version,
            )
        )
        return {
            "status": FAILED,
            "content_hash": digest,
            "error_reason": reason,
            "error_message": str(error),
        }


def classify_documents(
    source: DocumentSource,
    landed: LandedDocuments,
    fingerprint: str,
    summary: CollectSummary,
    doc_ids: list[str] | None = None,
    known_failures: dict[str, dict] | None = None,
    limits: CollectLimits | None = None,
    also_landed: Iterable[str] = (),
    read_batch: int = 32,
) -> Iterator[dict]:
    """One row per document (see `COLLECTED_SCHEMA`), counted into `summary`.

    With `doc_ids`, only those documents are looked at (a targeted run): ids that no longer
    exist at the source are `deleted`, and nothing else is listed or read. A document that
    failed `quarantine_after_failures` times is `quarantined` until its content changes.
    `also_landed` names documents the index holds that tracking does not know (deleted if
    the source no longer has them).

    Memory stays flat as the source grows: entries are classified a batch at a time against
    tracking, and the ids seen are spilled to disk to find the deletions at the end.
    """
    collector = _Collector(
        source, fingerprint, summary, known_failures or {}, limits or CollectLimits()
    )
    buckets = bucket_count(landed.count(), DELETION_BUCKET_DOCS)
    with tempfile.TemporaryDirectory(prefix="batch-pipeline-collect-") as scratch:
        seen = BucketSpill(scratch, "seen", ID_SCHEMA)
        entries = source.list_entries() if doc_ids is None else source.entries_for(doc_ids)
        for batch in batched(entries, LOOKUP_BATCH):
            ids = [entry.doc_id for entry in batch]
            seen.add(pa.table({"doc_id": ids}, schema=ID_SCHEMA), hash_buckets(ids, buckets))
            collector.landed = landed.lookup(ids)
            to_read: list[SourceEntry] = []
            for entry in batch:
                row = collector.without_reading(entry)
                if row is not None:
                    yield collector._count(row)
                    continue
                to_read.append(entry)
                if len(to_read) >= read_batch:
                    yield from collector.read(to_read)
                    to_read = []
            if to_read:
                yield from collector.read(to_read)
        seen.close()
        summary.gaps = source.listing_gaps()
        for gap in summary.gaps:  # recorded against the folder (or document) not seen
            entry = SourceEntry(gap.prefix, "")
            if gap.bad_name:  # its own name's fault: settled like a content failure
                failed = collector._failed(
                    entry, "invalid_doc_id", DocumentError("", gap.reason), None
                )
            else:
                error = DocumentReadError(f"{gap.reason}; its documents keep their rows")
                failed = collector._failed(entry, UNLISTABLE, error, None)
            yield collector._count(_row(entry, **failed))
        known = BucketSpill(scratch, "landed", LANDED_SCHEMA)
        for page in _landed_candidates(landed, doc_ids, also_landed):
            ids = [doc_id for doc_id, _ in page]
            table = pa.table({"doc_id": ids, "content_hash": [h for _, h in page]})
            known.add(table, hash_buckets(ids, buckets))
        known.close()
        for bucket in range(buckets):
            present = set(seen.read(bucket)["doc_id"].to_pylist())
            gone = known.read(bucket).to_pylist()
            for row in sorted(gone, key=lambda row: row["doc_id"]):
                unseen = any(gap.covers(row["doc_id"]) for gap in summary.gaps)
                if row["doc_id"] in present or unseen:
                    continue
                present.add(row["doc_id"])  # a targeted run may name a document twice
                summary.counts[DELETED] += 1
                summary.add_change(row["doc_id"], None)
                yield {
                    "doc_id": row["doc_id"],
                    "status": DELETED,
                    "content_hash": row["content_hash"],
                }


def _landed_candidates(
    landed: LandedDocuments, doc_ids: list[str] | None, also_landed: Iterable[str]
) -> Iterator[list[tuple[str, str | None]]]:
    """The documents a run may find deleted: every landed one, or the targeted ids landed."""
    if doc_ids is None:
        yield from landed.pages()
    else:
        for batch in batched(doc_ids, LOOKUP_BATCH):
            yield [(d, doc.content_hash) for d, doc in landed.lookup(batch).items()]
    targeted = None if doc_ids is None else set(doc_ids)
    orphans = [d for d in also_landed if targeted is None or d in targeted]
    for batch in batched(orphans, LOOKUP_BATCH):
        yield [(d, None) for d in batch]


def _row(entry: SourceEntry, **values: object) -> dict:
    return {
        "doc_id": entry.doc_id,
        "source_version": entry.version,
        "size": entry.size,
        "source_changed_at": entry.changed_at,
        **values,
    }


def collect_documents(
    source: DocumentSource,
    landed: LandedDocuments,
    fingerprint: str,
    out_path: Path,
    doc_ids: list[str] | None = None,
    known_failures: dict[str, dict] | None = None,
    limits: CollectLimits | None = None,
    also_landed: Iterable[str] = (),
    on_changes: Callable[[dict[str, float | None]], None] | None = None,
    stage_started: float | None = None,
) -> CollectSummary:
    """Classify the source's documents against `landed` and write them to `out_path`.

    `stage_started` (a `time.perf_counter()` reading) is when the stage began, for its seconds.
    New, changed and deleted documents go to `on_changes` (to be recorded as pending) a
    batch at a time as they are found.
    """
    summary = CollectSummary(on_changes=on_changes)
    schema = stamped_collect_schema(COLLECTED_SCHEMA, full=doc_ids is None)
    with StageWriter(out_path, schema, stage_started) as writer:
        for row in classify_documents(
            source, landed, fingerprint, summary, doc_ids, known_failures, limits, also_landed
        ):
            writer.write(row)
    summary.flush_changes()
    return summary
