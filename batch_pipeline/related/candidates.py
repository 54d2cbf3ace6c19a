"""What related documents read of the collection's live index generation: each document's
version (the content hash its chunks were embedded from), its vector (the mean of its chunks'),
its passage (title and first chunk) and its candidates.

A document's candidates are the documents hybrid search ranks first for its title and its
vector (`state.retrieval`, the way search ranks), itself left out: each candidate's score is
its best chunk's fused score. Vector similarity is near enough symmetric that a document's
candidates are also the documents whose candidates it may enter: what `prepare` marks stale
when it changes.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from batch_pipeline.iterables import batched
from batch_pipeline.state.retrieval import HYBRID, VectorParams, ranked_rows
from batch_pipeline.state.vector_store import VectorStore, in_filter, sql_literal

ROWS_PER_CANDIDATE = 8  # chunk rows ranked per candidate wanted: documents have several chunks
PASSAGE_CHARACTERS = 1500  # what a reranker reads of a candidate


@dataclass(frozen=True)
class Passage:
    """What a document shows a reranker: its title and the start of its text."""

    title: str
    text: str

    @property
    def query(self) -> str:
        """The document as the question its related documents answer: its title (or the
        start of its text, without one)."""
        return self.title or self.text[:200]

    @property
    def document(self) -> str:
        return f"{self.title}\n\n{self.text}" if self.title else self.text


class LiveIndex:
    """The collection's live index generation (`index`), read for related documents."""

    def __init__(self, store: VectorStore, index: str, params: VectorParams) -> None:
        self.store = store
        self.index = index
        self.params = params
        self.table = store.open(index)

    def versions(self) -> dict[str, str]:
        """Every document's version: the content hash its chunks were embedded from."""
        versions: dict[str, str] = {}
        for batch in self.store.scan_batches(self.index, ["doc_id", "content_hash"]):
            versions.update(
                zip(batch["doc_id"].to_pylist(), batch["content_hash"].to_pylist(), strict=True)
            )
        return versions

    def vectors(self, doc_ids: list[str]) -> Iterator[tuple[str, np.ndarray]]:
        """Each document's unit vector (the mean of its chunks'), a batch of ids at a time."""
        for ids in batched(sorted(doc_ids)):
            rows = self.store.scan(self.index, ["doc_id", "vector"], in_filter("doc_id", ids))
            sums: dict[str, np.ndarray] = {}
            vectors = rows["vector"].to_numpy(zero_copy_only=False)
            for doc_id, vector in zip(rows["doc_id"].to_pylist(), vectors, strict=True):
                vector = np.asarray(vector, dtype=np.float32)
                sums[doc_id] = sums[doc_id] + vector if doc_id in sums else vector
            for doc_id in sorted(sums):
                yield doc_id, sums[doc_id] / max(float(np.linalg.norm(sums[doc_id])), 1e-12)

    def passages(self, doc_ids: list[str]) -> dict[str, Passage]:
        """Each document's passage: its title and first chunk's text."""
        found: dict[str, tuple[int, Passage]] = {}
        columns = ["doc_id", "chunk_index", "title", "text"]
        for ids in batched(sorted(doc_ids)):
            rows = self.store.scan(self.index, columns, in_filter("doc_id", ids)).to_pylist()
            for row in rows:
                known = found.get(row["doc_id"])
                if known is None or row["chunk_index"] < known[0]:
                    text = (row["text"] or "")[:PASSAGE_CHARACTERS]
                    found[row["doc_id"]] = (row["chunk_index"], Passage(row["title"] or "", text))
        return {doc_id: passage for doc_id, (_, passage) in found.items()}

    def candidates(
        self, doc_id: str, title: str, vector: np.ndarray, count: int
    ) -> list[tuple[str, float]]:
        """The `count` documents hybrid search ranks first for the document's title and
        vector, itself left out, each with its best chunk's fused score."""
        others = f"doc_id != {sql_literal(doc_id)}"
        depth = count * ROWS_PER_CANDIDATE
        rows = ranked_rows(
            [self.table], title, vector, HYBRID, depth, others, ("doc_id",), self.params
        )
        best: dict[str, float] = {}
        for row in rows:
            best.setdefault(row["doc_id"], float(row["score"]))
        return list(best.items())[:count]
