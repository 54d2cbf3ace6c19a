"""The drift check: re-embed a sample of landed chunks and compare with the stored vectors.

It catches the batch output diverging from the live inference path: another library
version, device or dtype. Each landed row keeps its exact model input (`input_text`).
"""

import numpy as np

from batch_pipeline.inference import EmbeddingRunner
from batch_pipeline.vector_store import VectorStore


def drift_report(
    store: VectorStore,
    index: str,
    runner: EmbeddingRunner,
    sample: int,
    min_cosine: float,
    seed: int | None = None,
) -> dict[str, object]:
    rows = store.scan(index, ["chunk_id", "input_text", "vector"])
    if rows.num_rows == 0:
        return {"sampled": 0, "min_cosine": None, "passed": True, "drifted_chunks": []}
    rng = np.random.default_rng(seed)
    picks = rng.choice(rows.num_rows, size=min(sample, rows.num_rows), replace=False)
    chosen = rows.take(picks.tolist()).to_pylist()
    fresh = runner.embed([r["input_text"] for r in chosen])
    stored = np.asarray([r["vector"] for r in chosen], dtype=np.float32)
    norms = np.linalg.norm(fresh, axis=1) * np.linalg.norm(stored, axis=1)
    cosine = (fresh * stored).sum(axis=1) / np.maximum(norms, 1e-12)
    drifted = [r["chunk_id"] for r, c in zip(chosen, cosine, strict=True) if c < min_cosine]
    return {
        "sampled": len(chosen),
        "min_cosine": round(float(cosine.min()), 7),
        "threshold": min_cosine,
        "passed": not drifted,
        "drifted_chunks": drifted,
    }
