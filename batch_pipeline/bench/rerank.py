"""Reranker benchmark: the score family's engines on the same pairs, in one run.

    python -m batch_pipeline.bench.rerank [--reranker DIR] [--candidates 20] [--device cpu]

The pairs: each query of the sample's evaluation set (`data/handbook_eval.jsonl`) with the
first `--candidates` pages of the sample handbook (a page: its title and first 1,500
characters), as a reranker sees a retriever's top N. The reranker: `--reranker`, a
cross-encoder folder you have (none installs from the package registries), or by default the
TEST cross-encoder built from the shipped all-MiniLM-L6-v2 (its architecture and length are a
reranker's, its scores mean nothing: the speed is what is measured). The engines, each after
a warm-up call, model load outside the timed part:

1. `sentence-transformers`: `CrossEncoder` in this process (torch), the baseline;
2. `vllm`: `LLM.score` on vLLM's engine in this process (`runner="pooling"`).

It prints pairs per second for each, the ratio to the baseline, and the largest difference
between their scores.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
PAGE_CHARACTERS = 1500


def handbook_pairs(candidates: int) -> list[tuple[str, str]]:
    """Every evaluation query with the first `candidates` handbook pages."""
    queries = [
        json.loads(line)["query"]
        for line in (REPO / "data" / "handbook_eval.jsonl").read_text().splitlines()
        if line.strip()
    ]
    pages = sorted((REPO / "data" / "handbook").rglob("*.md"))[:candidates]
    texts = [page.read_text(encoding="utf-8")[:PAGE_CHARACTERS] for page in pages]
    return [(query, text) for query in queries for text in texts]


def timed(scorer, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, float]:  # noqa: ANN001
    scorer.score(pairs[:8])  # load and warm up, outside the timed part
    started = time.perf_counter()
    scores = scorer.score(pairs)
    return scores, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    from batch_pipeline.config import ModelConfig
    from batch_pipeline.inference.cross_encoder import CrossEncoderScorer
    from batch_pipeline.inference.models import resolve_model
    from batch_pipeline.inference.rerankers import build_test_cross_encoder, resolve_reranker
    from batch_pipeline.inference.vllm_embedder import embed_engine_settings
    from batch_pipeline.inference.vllm_scorer import VllmScorer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reranker", type=Path, help="a cross-encoder folder")
    parser.add_argument("--candidates", type=int, default=20, help="pages per query")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    pairs = handbook_pairs(args.candidates)
    with tempfile.TemporaryDirectory(prefix="bench-rerank-") as work:
        folder = args.reranker or build_test_cross_encoder(
            resolve_model(ModelConfig()).path, Path(work) / "test-cross-encoder"
        )
        reranker = resolve_reranker(folder)
        print(
            f"{len(pairs):,} pairs, reranker {reranker.name} (max {reranker.max_length} "
            f"tokens), device {args.device}",
            flush=True,
        )
        engines = {
            "sentence-transformers": CrossEncoderScorer(reranker, device=args.device),
            "vllm": VllmScorer(reranker, embed_engine_settings(args.device, "auto")),
        }
        found = {}
        for name, scorer in engines.items():
            found[name] = timed(scorer, pairs)
            print(f"  {name:<22} loaded in {scorer.load_seconds:5.1f} s", flush=True)
    baseline = len(pairs) / found["sentence-transformers"][1]
    print(f"\n  {'engine':<22} {'pairs/s':>9} {'ratio':>7}")
    for name, (_scores, seconds) in found.items():
        rate = len(pairs) / seconds
        print(f"  {name:<22} {rate:>9.1f} {rate / baseline:>6.2f}x")
    difference = np.abs(found["sentence-transformers"][0] - found["vllm"][0]).max()
    print(f"  largest score difference: {difference:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
