"""Stage 5, land: write each affected document's chunks to LanceDB with their lineage.

For every new or changed document the table ends up holding exactly its current chunks: fresh
vectors for stale chunks, carried-over vectors (with their original run, model and time) for
unchanged ones. Stale chunks of changed documents and all chunks of deleted documents are
removed in the same commit as the upserts. Replaying a run writes the same rows again.

A document some of whose chunks failed to embed is not landed at all (its previous rows stay)
and is recorded as failed, so a reader never sees a partial document.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from batch_pipeline.collect import DELETED, FAILED, QUARANTINED, UNCHANGED
from batch_pipeline.faults import crash_point
from batch_pipeline.reconcile import chunk_digest
from batch_pipeline.staging import read_table
from batch_pipeline.tracking import FailureRecord, TrackingStore
from batch_pipeline.vector_store import VectorStore

DOCS_PER_COMMIT = 500


@dataclass
class LandSummary:
    documents_landed: int = 0
    documents_deleted: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_removed: int = 0
    table_version: int | None = None
    documents_superseded: int = 0  # a concurrent run landed newer content first
    compacted: bool = False  # small commits had piled up past the thresholds
    failures: list[FailureRecord] = field(default_factory=list)

    def metadata(self) -> dict[str, object]:
        return {
            "documents_landed": self.documents_landed,
            "documents_deleted": self.documents_deleted,
            "documents_failed": len(self.failures),
            "chunks_written": self.chunks_written,
            "chunks_embedded": self.chunks_embedded,
            "chunks_reused": self.chunks_reused,
            "chunks_removed": self.chunks_removed,
            "documents_superseded": self.documents_superseded,
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


def land_documents(
    store: VectorStore,
    tracking: TrackingStore,
    ctx: LandingContext,
    collected_path: Path,
    chunks_path: Path,
    embeddings_path: Path,
) -> LandSummary:
    summary = LandSummary()
    collected = read_table(
        collected_path,
        ["doc_id", "status", "source_version", "content_hash", "title", "source_changed_at"],
    ).to_pylist()
    changed_at = {d["doc_id"]: d["source_changed_at"] for d in collected}
    deleted = [d["doc_id"] for d in collected if d["status"] == DELETED]
    chunks = read_table(chunks_path)
    embeddings = read_table(embeddings_path)
    vector_of = {key: i for i, key in enumerate(embeddings["input_hash"].to_pylist())}
    vectors = (
        embeddings["vector"].combine_chunks().flatten().to_numpy().reshape(-1, ctx.dimension)
        if embeddings.num_rows
        else np.zeros((0, ctx.dimension), np.float32)
    )
    embedded_at = embeddings["embedded_at"].to_pylist()

    rows_by_doc: dict[str, list[dict]] = defaultdict(list)
    for row in chunks.to_pylist():
        rows_by_doc[row["doc_id"]].append(row)

    # Another run may have landed newer content since this run collected: never go back.
    collected_at = collected_path.stat().st_mtime
    current = tracking.landed_documents(ctx.index)

    def superseded(doc_id: str) -> bool:
        doc = current.get(doc_id)
        if doc is None or doc.landed_at <= collected_at:
            return False
        return doc_id in deleted or (doc.source_changed_at or 0) > (changed_at.get(doc_id) or 0)

    skipped = {d for d in [*rows_by_doc, *deleted] if superseded(d)}
    summary.documents_superseded = len(skipped)
    deleted = [d for d in deleted if d not in skipped]
    for doc_id in skipped:
        rows_by_doc.pop(doc_id, None)

    landed_docs: list[dict] = []
    doc_ids = list(rows_by_doc)
    for start in range(0, max(len(doc_ids), 1), DOCS_PER_COMMIT):
        group = doc_ids[start : start + DOCS_PER_COMMIT]
        reuse_ids = [r["chunk_id"] for d in group for r in rows_by_doc[d] if not r["stale"]]
        reused = {
            row["chunk_id"]: row for row in store.fetch_chunks(ctx.index, reuse_ids).to_pylist()
        }
        rows: list[dict] = []
        ready: list[str] = []
        for doc_id in group:
            doc_rows = _document_rows(
                rows_by_doc[doc_id], reused, vector_of, vectors, embedded_at, ctx
            )
            if isinstance(doc_rows, FailureRecord):
                summary.failures.append(doc_rows)
                continue
            ready.append(doc_id)
            rows.extend(doc_rows)
            first = rows_by_doc[doc_id][0]
            landed_docs.append(
                {
                    "doc_id": doc_id,
                    "content_hash": first["content_hash"],
                    "source_version": first["source_version"],
                    "title": first["title"] or "",
                    "fingerprint": ctx.fingerprint,
                    "chunk_count": len(doc_rows),
                    "chunk_digest": chunk_digest(
                        (r["chunk_id"], r["input_hash"], r["model_fingerprint"]) for r in doc_rows
                    ),
                    "source_changed_at": changed_at.get(doc_id),
                }
            )
            summary.chunks_embedded += sum(r["stale"] for r in rows_by_doc[doc_id])
            summary.chunks_reused += sum(not r["stale"] for r in rows_by_doc[doc_id])
        scope = ready + (deleted if start == 0 else [])
        if not scope:
            continue
        before = store.chunk_keys(ctx.index, scope)
        summary.table_version = store.replace_documents(ctx.index, rows, scope, ctx.dimension)
        crash_point("land", "commit")  # tests only: the index has it, tracking does not yet
        kept = {r["chunk_id"] for r in rows}
        summary.chunks_removed += len(set(before) - kept)
        summary.chunks_written += len(rows)
        summary.documents_landed += len(ready)
    summary.documents_deleted = len(deleted)
    if summary.table_version is None:
        table = store.open(ctx.index)
        summary.table_version = table.version if table is not None else None

    settled = [f.doc_id for f in summary.failures] + [
        d["doc_id"] for d in collected if d["status"] in (FAILED, QUARANTINED)
    ]
    tracking.record_landed(ctx.index, landed_docs, deleted, ctx.run_id, settled)
    tracking.update_source_versions(
        ctx.index,
        {
            d["doc_id"]: d["source_version"]
            for d in collected
            if d["status"] == UNCHANGED and d["source_version"]
        },
    )
    return summary


def _document_rows(
    chunk_rows: list[dict],
    reused: dict[str, dict],
    vector_of: dict[str, int],
    vectors: np.ndarray,
    embedded_at: list,
    ctx: LandingContext,
) -> list[dict] | FailureRecord:
    out = []
    for chunk in chunk_rows:
        base = {
            "collection": ctx.collection,
            "partition": ctx.partition,
            "doc_id": chunk["doc_id"],
            "chunk_id": chunk["chunk_id"],
            "chunk_index": chunk["chunk_index"],
            "title": chunk["title"],
            "section": chunk["section"],
            "text": chunk["text"],
            "input_text": chunk["input_text"],
            "input_hash": chunk["input_hash"],
            "source_version": chunk["source_version"],
            "content_hash": chunk["content_hash"],
        }
        if chunk["stale"]:
            position = vector_of.get(chunk["input_hash"])
            if position is None:
                return _failure(chunk, "a chunk could not be embedded (see the execute stage)")
            base.update(
                vector=vectors[position],
                model_name=ctx.model_name,
                model_fingerprint=ctx.fingerprint,
                run_id=ctx.run_id,
                embedded_at=embedded_at[position],
            )
        else:
            previous = reused.get(chunk["chunk_id"])
            if previous is None:
                return _failure(chunk, "an unchanged chunk vanished from the index; retry the run")
            base.update(
                vector=previous["vector"],
                model_name=previous["model_name"],
                model_fingerprint=previous["model_fingerprint"],
                run_id=previous["run_id"],
                embedded_at=previous["embedded_at"],
            )
        out.append(base)
    return out


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


def table_metadata(store: VectorStore, collection: str) -> dict[str, object]:
    """Row count, version and lineage range of a collection's table."""
    stats = store.stats(collection)
    if stats is None:
        return {"rows": 0}
    return {
        "rows": stats.rows,
        "documents": stats.documents,
        "table_version": stats.version,
        "oldest_embedded_at": str(stats.oldest_embedded_at),
        "newest_embedded_at": str(stats.newest_embedded_at),
        "models": stats.models,
    }
