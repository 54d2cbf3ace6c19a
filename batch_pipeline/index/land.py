"""Stage 5, land: write each affected document's chunks to LanceDB with their lineage.

For every new or changed document the table ends up holding exactly its current chunks: fresh
vectors for stale chunks, carried-over vectors (with their original run, model and time) for
unchanged ones. A changed document's stale chunks are removed in the same commit that writes
its new ones, so a reader never sees it half old, half new; deleted documents' chunks are
removed in commits of their own. Documents land `DOCS_PER_COMMIT` to a commit, each commit
followed by its tracking record. Replaying a run writes the same rows again.

A document some of whose chunks failed to embed is not landed at all (its previous rows stay)
and is recorded as failed, so a reader never sees a partial document. One whose chunk a
provider has not answered yet (`ExecuteAnswers.awaited`) is not landed either, and stays
pending without a failure: the run that collects the answer lands it.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from batch_pipeline.faults import crash_point
from batch_pipeline.index.join import vectors_in_chunk_order
from batch_pipeline.index.prepare import CHUNKS_SCHEMA
from batch_pipeline.iterables import batched
from batch_pipeline.sources.reading import metadata_json
from batch_pipeline.stages.collect import (
    CHANGED,
    DELETED,
    FAILED,
    NEW,
    QUARANTINED,
    UNCHANGED,
)
from batch_pipeline.stages.execute import ExecuteAnswers
from batch_pipeline.state.reconcile import ReconcileReport, chunk_digest
from batch_pipeline.state.spill import scratch_dir
from batch_pipeline.state.staging import StagePath, collected_at, read_batches
from batch_pipeline.state.table_indexes import IndexHealth, IndexUpkeep
from batch_pipeline.state.tracking import CONTENT_FAILURE_REASONS, FailureRecord, TrackingStore
from batch_pipeline.state.vector_store import LINEAGE_COLUMNS, VectorStore

DOCS_PER_COMMIT = 500
# what a table row takes over from its chunk in prepare's file, as it is
NOT_CARRIED = {"token_count", "stale", "metadata"}  # planning's, and metadata typed apart
CARRIED_COLUMNS = tuple(name for name in CHUNKS_SCHEMA.names if name not in NOT_CARRIED)


@dataclass
class LandSummary:
    """What a land did. Of the chunks written, `chunks_embedded` got vectors this run
    computed, `chunks_resumed` vectors from an interrupted run's checkpoints, and
    `chunks_reused` the vectors already in the table; `chunks_superseded` were not written
    because another run landed newer content of their documents first."""

    documents_landed: int = 0
    documents_deleted: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_resumed: int = 0
    chunks_reused: int = 0
    chunks_removed: int = 0
    chunks_superseded: int = 0
    table_version: int | None = None
    documents_superseded: int = 0  # a concurrent run landed newer content first
    # a provider has yet to answer for one of their chunks: pending, for the next run
    documents_awaiting: int = 0
    compacted: bool = False  # small commits had piled up past the thresholds
    failures: list[FailureRecord] = field(default_factory=list)
    # set by the pipeline once landed: the table checked against tracking, and the
    # partition's completeness from that check
    reconciled: ReconcileReport | None = None
    completeness: dict[str, float | int] = field(default_factory=dict)
    indexes: IndexUpkeep | None = None  # what the land's upkeep did to the table's indexes
    # the indexes as the land left them, read under its lease: another shard's land that
    # commits rows after it cannot make them look stale (`indexes_current` reads this)
    index_health: IndexHealth | None = None

    def metadata(self) -> dict[str, object]:
        upkeep = self.indexes.metadata() if self.indexes is not None else {}
        return {
            **upkeep,
            "documents_landed": self.documents_landed,
            "documents_deleted": self.documents_deleted,
            "documents_failed": len(self.failures),
            "chunks_written": self.chunks_written,
            "chunks_embedded": self.chunks_embedded,
            "chunks_resumed": self.chunks_resumed,
            "chunks_reused": self.chunks_reused,
            "chunks_superseded": self.chunks_superseded,
            "chunks_removed": self.chunks_removed,
            "documents_superseded": self.documents_superseded,
            "documents_awaiting": self.documents_awaiting,
            "compacted": self.compacted,
        }


@dataclass(frozen=True)
class LandingContext:
    collection: str
    index: str  # the generation's table and tracking key
    partition: str
    run_id: str
    model_name: str
    fingerprint: str
    dimension: int
    # the frame's mass-deletion guard: why deleting (n, while adding m) is held back, or None
    hold_deletions: Callable[[int, int], str | None]
    metadata_fields: dict[str, str] = field(default_factory=dict)  # declared: name -> type


def land_documents(
    store: VectorStore,
    tracking: TrackingStore,
    ctx: LandingContext,
    collected_path: StagePath | Path,
    chunks_path: StagePath | Path,
    embeddings_path: StagePath | Path,
) -> LandSummary:
    """Land a run's documents, `DOCS_PER_COMMIT` at a time, in bounded memory.

    The chunks file is streamed in document order with each stale chunk's vector joined onto
    it from the embeddings file through an on-disk join (see `batch_pipeline.index.join`). Each
    group of documents is one table commit followed by its tracking record.
    """
    summary = LandSummary()
    answers = ExecuteAnswers.of(embeddings_path)
    since = collected_at(collected_path)
    changed_at: dict[str, float | None] = {}
    deleted: list[str] = []
    settled: list[str] = []
    added = 0
    columns = ["doc_id", "status", "source_changed_at", "error_reason"]
    for batch in read_batches(collected_path, columns):
        for doc_id, status, changed, reason in zip(
            *(batch[c].to_pylist() for c in columns), strict=True
        ):
            if status in (NEW, CHANGED, DELETED):
                changed_at[doc_id] = changed
            added += status == NEW
            if status == DELETED:
                deleted.append(doc_id)
            elif status == QUARANTINED or (status == FAILED and reason in CONTENT_FAILURE_REASONS):
                settled.append(doc_id)

    deleted_set = set(deleted)
    # weighed before anything lands, against what the partition held when the run began
    held = ctx.hold_deletions(len(deleted), added)

    def not_superseded(doc_ids: list[str]) -> list[str]:
        """Drop documents another run landed newer content of since this run collected."""
        current = tracking.landed_documents(ctx.index, doc_ids)
        keep = []
        for doc_id in doc_ids:
            doc = current.get(doc_id)
            if (
                doc is not None
                and doc.landed_at > since
                and (
                    doc_id in deleted_set
                    or (doc.source_changed_at or 0) > (changed_at.get(doc_id) or 0)
                )
            ):
                summary.documents_superseded += 1
                continue
            keep.append(doc_id)
        return keep

    def commit(rows_by_doc: dict[str, list[dict]], removed: list[str]) -> None:
        group = not_superseded(list(rows_by_doc))
        overtaken = rows_by_doc.keys() - set(group)
        summary.chunks_superseded += sum(len(rows_by_doc[d]) for d in overtaken)
        removed = not_superseded(removed)
        reuse_ids = [r["chunk_id"] for d in group for r in rows_by_doc[d] if not r["stale"]]
        reused = {
            row["chunk_id"]: row for row in store.fetch_chunks(ctx.index, reuse_ids).to_pylist()
        }
        rows: list[dict] = []
        landed_docs: list[dict] = []
        for doc_id in group:
            doc_rows = _document_rows(rows_by_doc[doc_id], reused, ctx, answers)
            if doc_rows is None:  # a provider has not answered yet: pending, not failed
                summary.documents_awaiting += 1
                continue
            if isinstance(doc_rows, FailureRecord):
                summary.failures.append(doc_rows)
                continue
            rows.extend(doc_rows)
            landed_docs.append(_landed_document(doc_id, doc_rows, changed_at.get(doc_id), ctx))
            chunks = rows_by_doc[doc_id]
            summary.chunks_embedded += sum(r["stale"] and not r["resumed"] for r in chunks)
            summary.chunks_resumed += sum(r["stale"] and r["resumed"] for r in chunks)
            summary.chunks_reused += sum(not r["stale"] for r in chunks)
        scope = [d["doc_id"] for d in landed_docs] + removed
        if not scope:
            return
        before = store.chunk_keys(ctx.index, scope)
        summary.table_version = store.replace_documents(
            ctx.index,
            rows,
            scope,
            ctx.dimension,
            replaces_nothing=not before,
            fields=ctx.metadata_fields,
        )
        crash_point("land", "commit")  # tests only: the index has it, tracking does not yet
        tracking.record_landed(ctx.index, landed_docs, removed, ctx.run_id)
        summary.chunks_removed += len(set(before) - {r["chunk_id"] for r in rows})
        summary.chunks_written += len(rows)
        summary.documents_landed += len(landed_docs)
        summary.documents_deleted += len(removed)

    finished: set[str] = set()  # documents with chunks, once their group is committed
    group: dict[str, list[dict]] = {}
    with scratch_dir(chunks_path) as tmp:
        for row in vectors_in_chunk_order(chunks_path, embeddings_path, ctx.dimension, tmp):
            doc_id = row["doc_id"]
            if doc_id not in group:
                if doc_id in finished:
                    raise RuntimeError(f"chunks of {doc_id!r} are not together in {chunks_path}")
                if len(group) >= DOCS_PER_COMMIT:
                    commit(group, [])
                    finished.update(group)
                    group = {}
                group[doc_id] = []
            group[doc_id].append(row)
    if group:
        commit(group, [])
        finished.update(group)
    if held is None:  # else land everything else; these stay pending until confirmed
        for batch in batched(deleted, DOCS_PER_COMMIT):
            commit({}, batch)
    if summary.table_version is None:
        table = store.open(ctx.index)
        summary.table_version = table.version if table is not None else None

    # New or changed documents without chunks failed in prepare, for a reason in their content
    # (recorded there): settled like collect's content failures. Documents whose vectors could
    # not be computed (land's failures) stay pending: they are retried.
    settled += [d for d in changed_at if d not in finished and d not in deleted_set]
    tracking.record_landed(ctx.index, [], [], ctx.run_id, settled)
    for batch in read_batches(collected_path, ["doc_id", "status", "source_version"]):
        tracking.update_source_versions(
            ctx.index,
            {
                doc_id: version
                for doc_id, status, version in zip(
                    *(batch[c].to_pylist() for c in ("doc_id", "status", "source_version")),
                    strict=True,
                )
                if status == UNCHANGED and version
            },
        )
    return summary


def _landed_document(
    doc_id: str, doc_rows: list[dict], changed_at: float | None, ctx: LandingContext
) -> dict:
    first = doc_rows[0]
    runs = {r["run_id"] for r in doc_rows}
    return {
        "doc_id": doc_id,
        # the run whose vectors the document holds: this run if it embedded any of them, else
        # the run that embedded the newest (after a crash between a commit and this record,
        # the crashed run, whose rows the retry found in the table)
        "run_id": ctx.run_id
        if ctx.run_id in runs
        else max(doc_rows, key=lambda r: r["embedded_at"])["run_id"],
        "content_hash": first["content_hash"],
        "source_version": first["source_version"],
        "title": first["title"] or "",
        "fingerprint": ctx.fingerprint,
        "chunk_count": len(doc_rows),
        "chunk_digest": chunk_digest(
            (r["chunk_id"], r["input_hash"], r["model_fingerprint"]) for r in doc_rows
        ),
        "source_changed_at": changed_at,
    }


def _document_rows(
    chunk_rows: list[dict], reused: dict[str, dict], ctx: LandingContext, answers: ExecuteAnswers
) -> list[dict] | FailureRecord | None:
    """A document's table rows; its failure when a chunk has no vector for a reason; None
    when a provider has yet to answer for one of its chunks."""
    out = []
    # one document's chunks carry the same metadata: typed once for all of them
    metadata = metadata_columns(chunk_rows[0].get("metadata"), ctx.metadata_fields)
    for chunk in chunk_rows:
        row = {
            "collection": ctx.collection,
            "partition": ctx.partition,
            **{name: chunk[name] for name in CARRIED_COLUMNS},
            **metadata,
        }
        if chunk["stale"]:
            if chunk["vector"] is None:
                if answers.awaited(chunk["input_hash"]):
                    return None
                why = "a chunk could not be embedded (see the execute stage)"
                return _failure(chunk, answers.reason(chunk["input_hash"], why))
            lineage = {
                "vector": chunk["vector"],
                "model_name": ctx.model_name,
                "model_fingerprint": ctx.fingerprint,
                "run_id": ctx.run_id,
                "embedded_at": chunk["embedded_at"],
            }
        else:
            lineage = reused.get(chunk["chunk_id"])
            if lineage is None:
                return _failure(chunk, "an unchanged chunk vanished from the index; retry the run")
        out.append({**row, **{name: lineage[name] for name in LINEAGE_COLUMNS}})
    return out


_CASTS = {"string": str, "int": int, "float": float}


def _typed(value: object, kind: str) -> object:
    """A metadata value as its declared type; None when it cannot be one."""
    if value is None:
        return None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        return {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(
            text
        )
    if kind == "string" and isinstance(value, dict | list):
        return metadata_json(value)
    try:
        return _CASTS[kind](value)
    except (TypeError, ValueError):
        return None


def metadata_columns(metadata: str | None, fields: dict[str, str]) -> dict[str, object]:
    """A document's metadata (JSON) as row columns: each declared field typed, in its own
    column; the rest in `metadata`, as JSON (None when nothing is left)."""
    values = json.loads(metadata) if metadata else {}
    row = {name: _typed(values.get(name), kind) for name, kind in fields.items()}
    row["metadata"] = metadata_json({k: v for k, v in values.items() if k not in fields})
    return row


def _failure(chunk: dict, message: str) -> FailureRecord:
    return FailureRecord(
        chunk["doc_id"],
        "land",
        "embedding_missing",
        "LandingError",
        message,
        chunk["content_hash"],
        chunk["source_version"],
    )


def table_metadata(store: VectorStore, index: str) -> dict[str, object]:
    """Row count, version and lineage range of a generation's table."""
    stats = store.stats(index)
    if stats is None:
        return {"rows": 0}
    return {
        "rows": stats.rows,
        "documents": stats.documents,
        "table_version": stats.version,
        "oldest_embedded_at": stats.oldest_embedded_at,
        "newest_embedded_at": stats.newest_embedded_at,
        "models": stats.models,
    }
