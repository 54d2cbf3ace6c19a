"""Stage 2, prepare: normalise and chunk new and changed documents, and mark stale chunks.

A chunk is stale (to be embedded) if and only if its staleness key, the hash of its exact model
input plus the model fingerprint, is not what the index holds for that chunk id. Chunks of a
changed document that are not stale keep their landed vectors.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from batch_pipeline.inference.devices import default_threads
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.sources.reading import metadata_json
from batch_pipeline.stages import PREPARE
from batch_pipeline.stages.collect import CHANGED, NEW
from batch_pipeline.stages.columns import INPUT_IDS
from batch_pipeline.state.staging import StageWriter, read_batches
from batch_pipeline.state.tracking import FailureRecord
from batch_pipeline.text.chunk_pool import ChunkPool
from batch_pipeline.text.chunking import ChunkSettings

CHUNKS_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("chunk_index", pa.int32(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("section", pa.string()),
        pa.field("text", pa.large_string(), nullable=False),
        pa.field("input_text", pa.large_string(), nullable=False),
        pa.field("input_hash", pa.string(), nullable=False),
        pa.field("token_count", pa.int32(), nullable=False),
        INPUT_IDS,
        pa.field("source_version", pa.string()),
        pa.field("content_hash", pa.string()),
        pa.field("metadata", pa.string()),  # JSON: source metadata, then front matter
        pa.field("stale", pa.bool_(), nullable=False),
    ]
)

# chunk_id -> (doc_id, input_hash, model_fingerprint) of what the index holds for these docs
ExistingKeys = Callable[[list[str]], dict[str, tuple[str, str, str]]]


@dataclass
class PrepareSummary:
    documents: int = 0
    chunks: int = 0
    chunks_stale: int = 0
    chunks_unchanged: int = 0
    chunks_removed: int = 0
    tokens_stale: int = 0
    failures: list[FailureRecord] = field(default_factory=list)
    workers: int = 0  # processes that chunked (0: nothing needed chunking)

    def metadata(self) -> dict[str, int]:
        return {
            "documents_prepared": self.documents,
            "documents_failed": len(self.failures),
            "chunks_total": self.chunks,
            "chunks_to_embed": self.chunks_stale,
            "chunks_skipped": self.chunks_unchanged,
            "chunks_to_remove": self.chunks_removed,
            "tokens_to_embed": self.tokens_stale,
            "prepare_workers": self.workers,
        }


def prepare_workers(requested: int | None, documents: int, min_documents: int) -> int:
    """Processes to chunk `documents` with: `requested` (default one per available core),
    but one when there are too few documents to pay for starting the others."""
    workers = requested or default_threads()  # one per core this process may use
    return max(1, min(workers, documents // max(1, min_documents)))


def prepare_chunks(
    collected_path: Path,
    out_path: Path,
    get_tokenizer: Callable[[], Any],
    settings: ChunkSettings,
    fingerprint: str,
    existing_keys: ExistingKeys,
    docs_per_batch: int = 64,
    progress: ProgressSink | None = None,
    progress_interval: float = 15.0,
    workers: int | None = 1,
    min_documents_per_worker: int = 256,
) -> PrepareSummary:
    """Chunk every new or changed document; the tokenizer is only loaded (by `get_tokenizer`,
    seconds of imports) once a document needs chunking, so a no-op refresh skips it.
    `progress` hears how many collected documents were gone through, from the first one that
    needs chunking on, every `progress_interval` seconds.

    With `workers` > 1 (None: one per available core) and at least
    `min_documents_per_worker` documents to chunk per worker, documents are chunked in that
    many processes (see `ChunkPool`; `get_tokenizer` must then be picklable, such as a
    `functools.partial`); the output is identical either way.
    """
    started = time.perf_counter()
    summary = PrepareSummary()
    to_chunk = sum(
        pc.sum(pc.is_in(batch["status"], pa.array([NEW, CHANGED]))).as_py() or 0
        for batch in read_batches(collected_path, ["status"], batch_rows=65536)
    )
    # what it counts is what it prepares: the new and changed documents, not the listing
    tracker = Progress(PREPARE.name, to_chunk, progress, "documents", progress_interval)
    columns = [
        "doc_id",
        "status",
        "title",
        "format",
        "text",
        "source_version",
        "content_hash",
        "source_metadata",
    ]
    with StageWriter(out_path, CHUNKS_SCHEMA, started) as writer:
        if not to_chunk:  # a no-op refresh: no tokenizer, no pool, nothing reported
            return summary
        tracker.start()
        count = prepare_workers(workers, to_chunk, min_documents_per_worker)
        with ChunkPool(get_tokenizer, settings, count) as chunker:
            for batch in read_batches(collected_path, columns, batch_rows=docs_per_batch):
                docs = [d for d in batch.to_pylist() if d["status"] in (NEW, CHANGED)]
                if not docs:
                    continue
                for _, finished_docs, results in chunker.submit(batch.num_rows, docs):
                    _write_chunks(
                        writer, summary, finished_docs, results, existing_keys, fingerprint
                    )
                    tracker.advance(len(finished_docs))
            for _, finished_docs, results in chunker.drain():
                _write_chunks(writer, summary, finished_docs, results, existing_keys, fingerprint)
                tracker.advance(len(finished_docs))
    tracker.finish()  # reported only if something needed chunking
    summary.workers = count
    return summary


def _write_chunks(
    writer: StageWriter,
    summary: PrepareSummary,
    docs: list[dict],
    results: list[tuple],
    existing_keys: ExistingKeys,
    fingerprint: str,
) -> None:
    """Write one batch's chunks as one table, each marked stale or not against what the
    index holds."""
    existing = existing_keys([d["doc_id"] for d in docs])
    by_doc: dict[str, set[str]] = {}
    for chunk_id, (doc_id, _, _) in existing.items():
        by_doc.setdefault(doc_id, set()).add(chunk_id)
    columns: dict[str, list] = {name: [] for name in CHUNKS_SCHEMA.names}
    for doc, result in zip(docs, results, strict=True):
        if result[0] is None and result[1] is None:
            _, _, reason, error_class, message = result
            summary.failures.append(
                FailureRecord(
                    doc["doc_id"],
                    "prepare",
                    reason,
                    error_class,
                    message,
                    doc["content_hash"],
                    doc["source_version"],
                )
            )
            continue
        title, chunks, front_matter = result
        merged = {**json.loads(doc.get("source_metadata") or "{}"), **front_matter}
        metadata = metadata_json(merged)
        summary.documents += 1
        kept = set()
        for chunk_id, index, section, text, input_text, input_hash, tokens, ids in chunks:
            landed = existing.get(chunk_id)
            stale = landed is None or landed[1:] != (input_hash, fingerprint)
            kept.add(chunk_id)
            summary.chunks_stale += stale
            summary.tokens_stale += tokens if stale else 0
            row = {
                "doc_id": doc["doc_id"],
                "chunk_id": chunk_id,
                "chunk_index": index,
                "title": title,
                "section": section,
                "text": text,
                "input_text": input_text,
                "input_hash": input_hash,
                "token_count": tokens,
                "input_ids": ids,
                "source_version": doc["source_version"],
                "content_hash": doc["content_hash"],
                "metadata": metadata,
                "stale": stale,
            }
            for name in CHUNKS_SCHEMA.names:
                columns[name].append(row[name])
        summary.chunks += len(chunks)
        summary.chunks_removed += len(by_doc.get(doc["doc_id"], set()) - kept)
    summary.chunks_unchanged = summary.chunks - summary.chunks_stale
    if columns["chunk_id"]:
        writer.write_table(pa.table(columns, schema=CHUNKS_SCHEMA))
