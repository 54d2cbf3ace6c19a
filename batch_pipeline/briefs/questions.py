"""A brief's questions as retrieval rows (`briefs.index_questions`).

Each question of a collection's live briefs is embedded with a vector index generation's own
model and lands in that generation's companion table, `<collection>_questions__<fingerprint>`
(`batch_pipeline.names.question_index`), with the chunk table's schema: `section` is
`question`, `chunk_id` is `<doc_id>#question<n>`, `text` the question, `input_hash` the key of
the brief it came from and `source_version` that brief's generation. Search and the
retrieval measures read the companion beside the chunks, so a question leads to its document.

The rows are tied to their document: its rows are replaced when its live brief's key changes
(its content changed, or another brief generation went live), and deleted when it has no live
brief (a deleted document's brief is deleted with it). The index table itself never holds a
question, so its reconcile, completeness and vector reuse see chunks only.

Memory stays flat as the corpus grows: the live briefs and the question rows' keys are
spilled to scratch disk in buckets by doc id and compared a bucket at a time.
"""

import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from batch_pipeline.briefs.store import KEYS_SCHEMA, key_map, spilled_keys
from batch_pipeline.config import QUESTIONS_FIELD, EvaluationConfig
from batch_pipeline.generations.evaluation import load_eval_set, score_generation
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.iterables import batched
from batch_pipeline.names import generation_fingerprint, question_index
from batch_pipeline.state.retrieval import DEFAULT_PARAMS, VectorParams
from batch_pipeline.state.spill import BucketSpill, bucket_count, hash_buckets
from batch_pipeline.state.table_indexes import IndexHealth
from batch_pipeline.state.tracking import GenerationRecord
from batch_pipeline.state.vector_store import VectorStore

QUESTION_SECTION = "question"
DOCS_PER_COMMIT = 500
BUCKET_DOCS = 16_384  # documents whose live briefs and question keys are compared at once
# what the rows take of a brief table's row
QUESTION_COLUMNS = (
    "doc_id",
    "input_hash",
    "title",
    "content_hash",
    "collection",
    "partition",
    QUESTIONS_FIELD,
)


def question_id(doc_id: str, number: int) -> str:
    return f"{doc_id}#{QUESTION_SECTION}{number}"


@dataclass(frozen=True)
class BriefQuestions:
    """What a document's question rows are made from: its live brief."""

    doc_id: str
    key: str  # the brief's staleness key: the rows are redone when it changes
    questions: tuple[str, ...]
    title: str | None
    content_hash: str
    collection: str
    partition: str


@dataclass
class QuestionSummary:
    """What one index generation's question rows were brought to."""

    table: str
    documents_updated: int = 0
    documents_removed: int = 0
    questions_embedded: int = 0


@dataclass
class QuestionRows:
    """What a run did with the question rows: `status` (off, waiting, landed), each index
    generation's summary, and the live index's retrieval with and without them."""

    status: str
    summaries: list[QuestionSummary] = field(default_factory=list)
    scores: dict[str, float] | None = None
    live_rows: int = 0  # question rows beside the live index
    live_table: str | None = None  # and their table
    # every question table's indexes as its land left them, under its lease
    index_health: IndexHealth = field(default_factory=lambda: IndexHealth({}))

    def metadata(self) -> dict[str, object]:
        return {
            "questions_status": self.status,
            "question_generations": len(self.summaries),
            "questions_embedded": sum(s.questions_embedded for s in self.summaries),
            "question_documents_updated": sum(s.documents_updated for s in self.summaries),
            "question_documents_removed": sum(s.documents_removed for s in self.summaries),
            "question_rows": self.live_rows,
            **(self.scores or {}),
        }


def question_scores(
    store: VectorStore,
    live: GenerationRecord,
    evaluation: EvaluationConfig,
    embedder: Embedder,
    query_prefix: str = "",
    mode: str = "vector",
    params: VectorParams = DEFAULT_PARAMS,
) -> dict[str, float]:
    """Recall@k and MRR@k of the live index on its evaluation set, searched without and with
    its question rows, in one run: `<metric>_chunks` and `<metric>_with_questions`."""
    queries = load_eval_set(evaluation.path)
    scores: dict[str, float] = {}
    for suffix, also in (("chunks", ()), ("with_questions", (question_index(live.index_name),))):
        found = score_generation(
            store,
            live.index_name,
            embedder,
            queries,
            evaluation.k,
            query_prefix,
            also,
            mode,
            params,
        )
        found.pop("queries")
        scores |= {f"{metric}_{suffix}": value for metric, value in found.items()}
    scores["evaluation_queries"] = len(queries)
    return scores


def question_key(source_version: str, input_hash: str) -> str:
    """What a document's question rows are made from: the brief generation and its key."""
    return f"{source_version}:{input_hash}"


def brief_questions(row: dict, source_version: str) -> BriefQuestions:
    """A brief table's row as the questions to embed (blank and repeated ones left out)."""
    seen: dict[str, None] = {}
    for question in row.get(QUESTIONS_FIELD) or []:
        text = " ".join(str(question).split())
        if text:
            seen.setdefault(text)
    return BriefQuestions(
        doc_id=row["doc_id"],
        key=question_key(source_version, row["input_hash"]),
        questions=tuple(seen),
        title=row.get("title"),
        content_hash=row["content_hash"],
        collection=row["collection"],
        partition=row["partition"],
    )


@dataclass(frozen=True)
class LiveBriefs:
    """The live brief generation, as the question rows are made from it: its table (the
    rows' `source_version`), how many briefs it holds, and its `QUESTION_COLUMNS` streamed
    in record batches (read again for each index generation)."""

    index: str
    count: int
    batches: Callable[[], Iterable[pa.RecordBatch]]


def land_questions(
    store: VectorStore,
    index: str,
    live: LiveBriefs,
    embedder: Embedder,
    model: ResolvedModel,
    run_id: str,
    fields: dict[str, str] | None = None,
) -> QuestionSummary:
    """Make `index`'s companion table hold exactly the questions of the `live` briefs: embed
    those of documents whose brief key changed, delete those of documents without a live
    brief. A rerun embeds nothing. Compared a bucket of doc ids at a time (module doc)."""
    table = question_index(index)
    summary = QuestionSummary(table)
    buckets = bucket_count(max(live.count, store.count_rows(table)), BUCKET_DOCS)
    dim = int(embedder.dimension)
    lineage = (model.name, generation_fingerprint(index), run_id)
    with tempfile.TemporaryDirectory(prefix="batch-pipeline-questions-") as tmp:
        briefs: BucketSpill | None = None  # made with the brief table's own column types
        for batch in live.batches():
            briefs = briefs or BucketSpill(Path(tmp), "briefs", batch.schema)
            briefs.add(batch, hash_buckets(batch["doc_id"].to_pylist(), buckets))
        if briefs is not None:
            briefs.close()
        landed = spilled_keys(store.scan_batches(table, KEYS_SCHEMA.names), buckets, Path(tmp))
        for bucket in range(buckets):
            keys = key_map(landed.read(bucket))  # a row per question: one key per document
            found = briefs.read(bucket) if briefs is not None else KEYS_SCHEMA.empty_table()
            ids = found["doc_id"].to_pylist()
            hashes = found["input_hash"].to_pylist()
            changed = [
                i
                for i, (d, h) in enumerate(zip(ids, hashes, strict=True))
                if keys.get(d) != question_key(live.index, h)
            ]
            # only the changed briefs become Python rows: a rerun compares keys and stops
            current = {
                row["doc_id"]: brief_questions(row, live.index)
                for row in found.take(pa.array(changed, pa.int64())).to_pylist()
            }
            stale = sorted(current)
            removed = sorted(set(keys) - set(ids))
            for doc_ids in batched(stale + removed, DOCS_PER_COMMIT):
                made = [current[d] for d in doc_ids if d in current]
                rows = list(_rows(made, embedder, model, lineage))
                store.replace_documents(table, rows, doc_ids, dim, fields=fields)
                summary.questions_embedded += len(rows)
            summary.documents_updated += sum(1 for brief in current.values() if brief.questions)
            summary.documents_removed += len(removed)
    return summary


def _rows(
    briefs: list[BriefQuestions],
    embedder: Embedder,
    model: ResolvedModel,
    lineage: tuple[str, str, str],  # the model's name, the index generation's fingerprint, run
) -> Iterator[dict]:
    items = [(brief, n, q) for brief in briefs for n, q in enumerate(brief.questions)]
    if not items:
        return
    inputs = [model.document_prefix + question for _, _, question in items]
    vectors = embedder.embed(inputs)
    model_name, fingerprint, run_id = lineage
    now = datetime.now(UTC)
    for (brief, number, question), text, vector in zip(items, inputs, vectors, strict=True):
        yield {
            "collection": brief.collection,
            "partition": brief.partition,
            "doc_id": brief.doc_id,
            "chunk_id": question_id(brief.doc_id, number),
            "chunk_index": number,
            "title": brief.title,
            "section": QUESTION_SECTION,
            "text": question,
            "input_text": text,
            "vector": vector.tolist(),
            "input_hash": brief.key,
            "model_name": model_name,
            "model_fingerprint": fingerprint,
            "run_id": run_id,
            "embedded_at": now,
            "source_version": brief.key.split(":", 1)[0],
            "content_hash": brief.content_hash,
            "metadata": None,
        }
