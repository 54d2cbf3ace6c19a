"""Stage 2, prepare: normalise and chunk new and changed documents, and mark stale chunks.

A chunk is stale (to be embedded) if and only if its staleness key, the hash of its exact model
input plus the model fingerprint, is not what the index holds for that chunk id. Chunks of a
changed document that are not stale keep their landed vectors.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages import PREPARE
from batch_pipeline.stages.collect import CHANGED, NEW
from batch_pipeline.state.staging import StageWriter, read_batches, row_count
from batch_pipeline.state.tracking import FailureRecord
from batch_pipeline.text.chunking import ChunkSettings, chunk_document
from batch_pipeline.text.normalize import parse_document

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
        pa.field("source_version", pa.string()),
        pa.field("content_hash", pa.string()),
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

    def metadata(self) -> dict[str, int]:
        return {
            "documents_prepared": self.documents,
            "documents_failed": len(self.failures),
            "chunks_total": self.chunks,
            "chunks_to_embed": self.chunks_stale,
            "chunks_skipped": self.chunks_unchanged,
            "chunks_to_remove": self.chunks_removed,
            "tokens_to_embed": self.tokens_stale,
        }


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
) -> PrepareSummary:
    """Chunk every new or changed document; the tokenizer is only loaded (by `get_tokenizer`,
    seconds of imports) once a document needs chunking, so a no-op refresh skips it.
    `progress` hears how many collected documents were gone through, from the first one that
    needs chunking on, every `progress_interval` seconds."""
    started = time.perf_counter()
    summary = PrepareSummary()
    tokenizer = None
    tracker = Progress(
        PREPARE.name, row_count(collected_path), progress, "documents", progress_interval
    )
    columns = ["doc_id", "status", "title", "format", "text", "source_version", "content_hash"]
    with StageWriter(out_path, CHUNKS_SCHEMA, started) as writer:
        for batch in read_batches(collected_path, columns, batch_rows=docs_per_batch):
            docs = [d for d in batch.to_pylist() if d["status"] in (NEW, CHANGED)]
            if not docs:
                tracker.advance(batch.num_rows)
                continue
            if tokenizer is None:  # outside the per-document guard: a load failure stops the run
                tracker.start()
                tokenizer = get_tokenizer()
            existing = existing_keys([d["doc_id"] for d in docs])
            by_doc: dict[str, set[str]] = {}
            for chunk_id, (doc_id, _, _) in existing.items():
                by_doc.setdefault(doc_id, set()).add(chunk_id)
            for doc in docs:
                try:
                    parsed = parse_document(doc["text"], doc["doc_id"], doc["format"])
                    parsed.title = doc["title"] or parsed.title
                    chunks = chunk_document(doc["doc_id"], parsed, tokenizer, settings)
                    if not chunks:
                        raise ValueError("the document has no text left after normalisation")
                except Exception as error:  # noqa: BLE001 - recorded per document, run goes on
                    summary.failures.append(
                        FailureRecord(
                            doc["doc_id"],
                            "prepare",
                            "no_text" if isinstance(error, ValueError) else "chunking_failed",
                            type(error).__name__,
                            str(error),
                            doc["content_hash"],
                            doc["source_version"],
                        )
                    )
                    continue
                summary.documents += 1
                kept = set()
                for chunk in chunks:
                    landed = existing.get(chunk.chunk_id)
                    stale = landed is None or landed[1:] != (chunk.input_hash, fingerprint)
                    kept.add(chunk.chunk_id)
                    summary.chunks += 1
                    summary.chunks_stale += stale
                    summary.chunks_unchanged += not stale
                    summary.tokens_stale += chunk.token_count if stale else 0
                    writer.write(
                        {
                            "doc_id": doc["doc_id"],
                            "chunk_id": chunk.chunk_id,
                            "chunk_index": chunk.chunk_index,
                            "title": parsed.title,
                            "section": chunk.section,
                            "text": chunk.text,
                            "input_text": chunk.input_text,
                            "input_hash": chunk.input_hash,
                            "token_count": chunk.token_count,
                            "source_version": doc["source_version"],
                            "content_hash": doc["content_hash"],
                            "stale": stale,
                        }
                    )
                summary.chunks_removed += len(by_doc.get(doc["doc_id"], set()) - kept)
            tracker.advance(batch.num_rows)
    tracker.finish()  # reported only if something needed chunking
    return summary
