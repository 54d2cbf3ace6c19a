"""Memory and time at scale: collect, prepare and plan over synthetic collections.

    python benchmarks/scale.py --sizes 10000,50000,200000 [--json-out scale.json]

Each size runs in a fresh subprocess (so peak RSS is that size's own): it writes N synthetic
Markdown documents (about five chunks each), runs collect -> prepare -> plan into a temporary
home, and reports seconds and peak RSS per stage. No model is loaded: these stages need only
the tokenizer. It then lands the chunks with FAKE vectors (no model: a million forward passes
on a CPU take hours) and times a no-op refresh: a full collect that finds nothing changed, so
prepare and plan have nothing to do and no forward pass runs; it runs in a process of its own,
so its peak RSS (reconcile, collect's lookups) is its own. Land's time and peak RSS (with the
fake vectors) are reported too: land joins vectors onto chunks on disk, so it stays bounded.
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = [
    *[
        "account",
        "billing",
        "invoice",
        "password",
        "workspace",
        "channel",
        "ticket",
        "policy",
        "retention",
        "export",
    ],
    *[
        "member",
        "admin",
        "guest",
        "security",
        "audit",
        "token",
        "webhook",
        "integration",
        "refund",
        "plan",
        "seat",
    ],
    *[
        "storage",
        "message",
        "search",
        "notification",
        "session",
        "device",
        "region",
        "backup",
        "request",
        "limit",
    ],
    *[
        "the",
        "a",
        "to",
        "of",
        "and",
        "in",
        "for",
        "with",
        "on",
        "by",
        "is",
        "are",
        "be",
        "can",
        "will",
        "your",
        "our",
        "this",
        "that",
        "when",
    ],
]


def make_corpus(root: Path, documents: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    written = 0
    for n in range(documents):
        folder = root / f"part-{n // 1000:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        sections = []
        for s in range(rng.randint(3, 7)):
            sentences = [
                " ".join(rng.choices(WORDS, k=rng.randint(8, 18))).capitalize() + "."
                for _ in range(rng.randint(6, 12))
            ]
            sections.append(f"## Section {s}\n\n" + " ".join(sentences))
        text = f"# Document {n}\n\n" + "\n\n".join(sections) + "\n"
        (folder / f"doc-{n:07d}.md").write_text(text)
        written += len(text)
    return written


class FakeRunner:
    """FAKE inference for the benchmark: a fixed unit vector per input, no model."""

    device = "fake"
    dtype = "float32"

    def __init__(self, pipeline) -> None:  # noqa: ANN001
        self.dimension = pipeline.model.embedding_dimension

    def run(self, batches, stats):  # noqa: ANN001, ANN201
        import numpy as np

        for positions, texts in batches:
            stats.inputs += len(texts)
            vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
            vectors[:, 0] = 1.0
            yield positions, vectors


def peak_rss_mib() -> float:
    """This process's peak RSS in MiB (VmHWM: unlike ru_maxrss, it starts afresh at exec)."""
    from batch_pipeline.measures.memory import high_water_bytes

    return high_water_bytes() / 2**20


def run_size(documents: int) -> dict:
    from batch_pipeline.runs.request import RunRequest

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        size = make_corpus(root / "docs", documents)
        generated = time.perf_counter() - started
        pipeline = _pipeline(root)
        figures: dict = {
            "documents": documents,
            "corpus_mib": round(size / 2**20, 1),
            "generate_seconds": round(generated, 1),
        }
        rss_before = peak_rss_mib()

        def timed(stage: str, call):  # noqa: ANN001, ANN202
            t0 = time.perf_counter()
            out = call()
            figures[f"{stage}_seconds"] = round(time.perf_counter() - t0, 2)
            figures[f"{stage}_peak_rss_mib"] = round(peak_rss_mib(), 1)
            return out

        collected = timed("collect", lambda: pipeline.collect("bench"))
        # prepare twice on the same collected file: in one process (the baseline), then with
        # one worker per core (what runs use), so the speed-up is measured in one run
        single = _pipeline(root, workers=1)
        timed("prepare_1_worker", lambda: single.prepare("bench-1", collected.path))
        chunks = timed("prepare", lambda: pipeline.prepare("bench", collected.path))
        figures["prepare_workers"] = chunks.summary.workers
        figures["prepare_speedup"] = round(
            figures["prepare_1_worker_seconds"] / max(figures["prepare_seconds"], 1e-9), 2
        )
        plan = timed("plan", lambda: pipeline.plan("bench", chunks.path))
        for stage in ("collect", "prepare_1_worker", "prepare", "plan"):
            figures[f"{stage}_docs_per_second"] = round(
                documents / max(figures[f"{stage}_seconds"], 1e-9)
            )
        figures["chunks"] = chunks.summary.chunks
        figures["inputs_planned"] = plan.summary.inputs
        figures["peak_rss_mib"] = round(peak_rss_mib(), 1)
        figures["rss_before_stages_mib"] = round(rss_before, 1)

        # Land with FAKE vectors (benchmark only: a million forward passes on a CPU take
        # hours), so that the index and tracking store hold what a real run leaves behind.
        embeddings = timed(
            "fake_execute",
            lambda: pipeline.execute("bench", plan.path, lambda: FakeRunner(pipeline)),
        )
        timed(
            "land",
            lambda: pipeline.land_stage(
                RunRequest("bench"), collected.path, chunks.path, embeddings.path
            ),
        )
        figures["table_rows"] = pipeline.store.stats(pipeline.index).rows
        # the no-op refresh in a process of its own, so its peak RSS is its own
        child = subprocess.run(
            [sys.executable, __file__, "--noop", str(root)], capture_output=True, text=True
        )
        if child.returncode != 0:
            raise RuntimeError(child.stderr[-3000:])
        noop = json.loads(child.stdout.strip().splitlines()[-1])
        figures.update(noop)
        figures["noop_seconds_per_10k_docs"] = round(noop["noop_seconds"] / documents * 10_000, 2)
        return figures


def _pipeline(root: Path, workers: int | None = None):  # noqa: ANN202
    from batch_pipeline.config import parse_config
    from batch_pipeline.index.product import open_partition
    from batch_pipeline.state.storage import resolve_storage

    config = parse_config(
        {
            "collections": [
                {"name": "synthetic", "source": {"kind": "filesystem", "path": "docs"}}
            ],
            "prepare": {"workers": workers},
        },
        base_dir=root,
    )
    return open_partition(config, resolve_storage(str(root / "home")), "synthetic")


def run_noop(root: Path) -> dict:
    """A full refresh where nothing changed: collect (with its reconcile), prepare, plan."""

    pipeline = _pipeline(root)
    _ = pipeline.index, pipeline.store  # per-process start-up (model files hashed), not per doc
    rss_before = peak_rss_mib()
    t0 = time.perf_counter()
    refresh = pipeline.collect("refresh")
    chunks = pipeline.prepare("refresh", refresh.path)
    plan = pipeline.plan("refresh", chunks.path)
    return {
        "noop_unchanged": refresh.summary.counts.get("unchanged", 0),
        "noop_inputs_planned": plan.summary.inputs,
        "noop_seconds": round(time.perf_counter() - t0, 2),
        "noop_rss_before_mib": round(rss_before, 1),
        "noop_peak_rss_mib": round(peak_rss_mib(), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,50000,200000")
    parser.add_argument("--json-out")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--noop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.noop:
        print(json.dumps(run_noop(Path(args.noop))))
        return 0
    if args.one:
        print(json.dumps(run_size(args.one)))
        return 0
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        child = subprocess.run(
            [sys.executable, __file__, "--one", str(size)], capture_output=True, text=True
        )
        if child.returncode != 0:
            print(child.stderr[-3000:], file=sys.stderr)
            return child.returncode
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(
            f"{r['documents']:>8} docs {r['chunks']:>9} chunks  docs/s: collect "
            f"{r['collect_docs_per_second']:>6}  prepare {r['prepare_1_worker_docs_per_second']:>5}"
            f" (1 worker) -> {r['prepare_docs_per_second']:>5} ({r['prepare_workers']} workers, "
            f"{r['prepare_speedup']}x)  plan {r['plan_docs_per_second']:>6}",
            flush=True,
        )
        print(
            f"{'':>18} collect {r['collect_seconds']:>7}s"
            f"  prepare {r['prepare_seconds']:>7}s  plan {r['plan_seconds']:>6}s  "
            f"peak RSS {r['peak_rss_mib']:>7} MiB  land {r['land_seconds']:>7}s "
            f"(peak RSS {r['land_peak_rss_mib']} MiB)  no-op {r['noop_seconds_per_10k_docs']}s/10k"
            f" (peak RSS {r['noop_peak_rss_mib']} MiB)",
            flush=True,
        )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
