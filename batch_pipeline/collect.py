"""Stage 1, collect: list the source, read what may have changed, classify every document.

A document whose source version (mtime+size, ETag, updated-at) and model fingerprint match
what landed is `unchanged` without being read. Others are read and hashed: `new`, `changed`,
or `unchanged` after all (touched but identical). Landed documents missing from the source are
`deleted`. A document that cannot be read or decoded is `failed`, with its reason.
"""

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from batch_pipeline.documents import DocumentError, content_hash, decode_document
from batch_pipeline.normalize import detect_format, parse_document
from batch_pipeline.sources import DocumentReadError, DocumentSource, RawDocument, SourceEntry
from batch_pipeline.staging import StageWriter
from batch_pipeline.tracking import FailureRecord, LandedDocument

NEW, CHANGED, UNCHANGED, DELETED, FAILED = "new", "changed", "unchanged", "deleted", "failed"
STATUSES = (NEW, CHANGED, UNCHANGED, DELETED, FAILED)

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
        pa.field("error_reason", pa.string()),
        pa.field("error_message", pa.string()),
    ]
)


@dataclass
class CollectSummary:
    counts: Counter = field(default_factory=Counter)
    failures: list[FailureRecord] = field(default_factory=list)
    bytes_read: int = 0
    changes: dict[str, float | None] = field(default_factory=dict)  # new/changed/deleted ids

    def metadata(self) -> dict[str, int]:
        return {f"documents_{status}": self.counts.get(status, 0) for status in STATUSES}


def classify_documents(
    source: DocumentSource,
    landed: dict[str, LandedDocument],
    fingerprint: str,
    summary: CollectSummary,
    doc_ids: list[str] | None = None,
    read_batch: int = 32,
) -> Iterator[dict]:
    """One row per document (see `COLLECTED_SCHEMA`), counted into `summary`.

    With `doc_ids`, only those documents are looked at (a targeted run): ids that no longer
    exist at the source are `deleted`, and nothing else is listed or read.
    """
    seen: set[str] = set()
    to_read: list[SourceEntry] = []
    entries = source.list_entries() if doc_ids is None else source.entries_for(doc_ids)
    for entry in entries:
        seen.add(entry.doc_id)
        previous = landed.get(entry.doc_id)
        if (
            previous is not None
            and previous.source_version == entry.version
            and previous.fingerprint == fingerprint
        ):
            row = _row(entry, status=UNCHANGED, content_hash=previous.content_hash)
            summary.counts[UNCHANGED] += 1
            yield row
            continue
        to_read.append(entry)
        if len(to_read) >= read_batch:
            yield from _read_batch(source, to_read, landed, fingerprint, summary)
            to_read = []
    yield from _read_batch(source, to_read, landed, fingerprint, summary)
    candidates = landed.keys() if doc_ids is None else [d for d in doc_ids if d in landed]
    for doc_id in sorted(set(candidates) - seen):
        summary.counts[DELETED] += 1
        summary.changes[doc_id] = None
        yield {"doc_id": doc_id, "status": DELETED, "content_hash": landed[doc_id].content_hash}


def _row(entry: SourceEntry, **values: object) -> dict:
    return {
        "doc_id": entry.doc_id,
        "source_version": entry.version,
        "size": entry.size,
        "source_changed_at": entry.changed_at,
        **values,
    }


def _read_batch(
    source: DocumentSource,
    entries: list[SourceEntry],
    landed: dict[str, LandedDocument],
    fingerprint: str,
    summary: CollectSummary,
) -> Iterator[dict]:
    if not entries:
        return
    by_id = {entry.doc_id: entry for entry in entries}
    for doc_id, result in source.read_many(list(by_id)):
        row = _row(
            by_id[doc_id], **_classify(doc_id, result, landed.get(doc_id), fingerprint, summary)
        )
        summary.counts[row["status"]] += 1
        if row["status"] in (NEW, CHANGED):
            summary.changes[doc_id] = row["source_changed_at"]
        yield row


def collect_documents(
    source: DocumentSource,
    landed: dict[str, LandedDocument],
    fingerprint: str,
    out_path: Path,
    doc_ids: list[str] | None = None,
) -> CollectSummary:
    """Classify the source's documents against `landed` and write them to `out_path`."""
    summary = CollectSummary()
    with StageWriter(out_path, COLLECTED_SCHEMA) as writer:
        for row in classify_documents(source, landed, fingerprint, summary, doc_ids):
            writer.write(row)
    return summary


def _classify(
    doc_id: str,
    result: RawDocument | DocumentReadError,
    previous: LandedDocument | None,
    fingerprint: str,
    summary: CollectSummary,
) -> dict:
    if isinstance(result, DocumentReadError):
        return _failed(summary, doc_id, "unreadable", result, None)
    summary.bytes_read += len(result.data)
    digest = content_hash(result.data)
    try:
        text = decode_document(result.data)
    except DocumentError as error:
        return _failed(summary, doc_id, error.reason, error, digest)
    if (
        previous is not None
        and previous.content_hash == digest
        and (previous.fingerprint == fingerprint)
    ):
        return {"status": UNCHANGED, "content_hash": digest}
    fmt = result.fmt or detect_format(doc_id)
    return {
        "status": NEW if previous is None else CHANGED,
        "content_hash": digest,
        "title": result.title or parse_document(text, doc_id, fmt).title,
        "format": fmt,
        "text": text,
    }


def _failed(
    summary: CollectSummary, doc_id: str, reason: str, error: Exception, digest: str | None
) -> dict:
    summary.failures.append(
        FailureRecord(doc_id, "collect", reason, type(error).__name__, str(error), digest)
    )
    return {
        "status": FAILED,
        "content_hash": digest,
        "error_reason": reason,
        "error_message": str(error),
    }
