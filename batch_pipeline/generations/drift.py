"""The drift check: re-embed a sample of landed chunks and compare with the stored vectors.

It catches the batch output diverging from the live inference path: another library
version, device or dtype. Each landed row keeps its exact model input (`input_text`). The
sample is read by row offset, so the check costs the same on any size of table.
"""

from dataclasses import dataclass, field

import numpy as np

from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.state.vector_store import VectorStore


@dataclass(frozen=True)
class DriftReport:
    sampled: int
    min_cosine: float | None
    threshold: float
    drifted_chunks: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.drifted_chunks

    def metadata(self) -> dict[str, object]:
        values: dict[str, object] = {
            "sampled": self.sampled,
            "threshold": self.threshold,
            "drifted_chunks": self.drifted_chunks,
        }
        if self.min_cosine is not None:
            values["min_cosine"] = self.min_cosine
        return values


def drift_report(
    store: VectorStore,
    index: str,
    embedder: Embedder,
    sample: int,
    min_cosine: float,
    seed: int | None = None,
) -> DriftReport:
    rows = store.sample(index, ["chunk_id", "input_text", "vector"], sample, seed)
    if rows.num_rows == 0:
        return DriftReport(sampled=0, min_cosine=None, threshold=min_cosine)
    chosen = rows.to_pylist()
    fresh = embedder.embed([r["input_text"] for r in chosen])
    stored = np.asarray([r["vector"] for r in chosen], dtype=np.float32)
    norms = np.linalg.norm(fresh, axis=1) * np.linalg.norm(stored, axis=1)
    cosine = (fresh * stored).sum(axis=1) / np.maximum(norms, 1e-12)
    drifted = [r["chunk_id"] for r, c in zip(chosen, cosine, strict=True) if c < min_cosine]
    return DriftReport(
        sampled=len(chosen),
        min_cosine=round(float(cosine.min()), 7),
        threshold=min_cosine,
        drifted_chunks=drifted,
    )
