"""Nearest-chunk search over a collection's LanceDB table (what retrieval readers do)."""

from dataclasses import asdict, dataclass

from batch_pipeline.inference import EmbeddingRunner
from batch_pipeline.pipeline import CollectionPipeline


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
    pipeline: CollectionPipeline, query: str, k: int = 5, runner: EmbeddingRunner | None = None
) -> list[SearchHit]:
    """The `k` chunks closest to `query` by cosine similarity (score 1.0 is identical)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    table = pipeline.store.open(pipeline.name)
    if table is None:
        raise CollectionNotIndexedError(
            f"collection {pipeline.name!r} has no index yet; materialise it first (make demo)"
        )
    runner = runner or EmbeddingRunner(pipeline.model)
    vector = runner.embed([pipeline.model.query_prefix + query])[0]
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
