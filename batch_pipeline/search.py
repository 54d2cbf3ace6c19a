"""Nearest-chunk search over a collection's LanceDB table (what retrieval readers do)."""

from dataclasses import asdict, dataclass

from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import resolve_model
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.pipeline import PartitionPipeline


@dataclass(frozen=True)
class SearchHit:
    rank: int
    score: float
    doc_id: str
    chunk_id: str
    title: str | None
    section: str | None
    text: str

    def as_dict(self) -> dict:
        return asdict(self)


class CollectionNotIndexedError(RuntimeError):
    """Search on a collection that has never landed."""


def search(
    pipeline: PartitionPipeline, query: str, k: int = 5, runner: Embedder | None = None
) -> list[SearchHit]:
    """The `k` chunks closest to `query` by cosine similarity (score 1.0 is identical)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    live = pipeline.live_generation()  # readers follow the live generation
    table = pipeline.store.open(live.index)
    if table is None:
        raise CollectionNotIndexedError(f"the live table {live.index!r} is missing")
    model = resolve_model(live.model)
    if runner is None or runner.resolved != model:
        runner = EmbeddingRunner(model)
    vector = runner.embed([model.query_prefix + query])[0]
    rows = (
        table.search(vector)
        .metric("cosine")
        .select(["doc_id", "chunk_id", "title", "section", "text", "_distance"])
        .limit(k)
        .to_list()
    )
    return [
        SearchHit(
            rank=i + 1,
            score=round(1.0 - float(row["_distance"]), 4),
            doc_id=row["doc_id"],
            chunk_id=row["chunk_id"],
            title=row["title"],
            section=row["section"],
            text=row["text"],
        )
        for i, row in enumerate(rows)
    ]
