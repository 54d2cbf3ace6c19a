"""The pipeline end to end on one prepared corpus: prepare -> plan -> execute, timed per stage.

    python -m batch_pipeline.bench.end_to_end [--device cuda] [--copies 20] [--workers N]

The corpus is the sample handbook, `--copies` times over, each copy under its own titles (so
no chunk input repeats and the plan folds nothing): 100 x copies Markdown documents. Prepare
chunks them with the pipeline's own `ChunkPool` (one worker per core by default), plan packs
them with `plan_inputs`, and execute runs the batches through `EmbeddingRunner`. It prints
seconds and docs/s or inputs/s per stage and which stage bounds the pipeline: on a GPU host,
execute is one or two orders of magnitude faster than on a CPU, so prepare's share shows
whether it keeps up. Like `bench`, it needs no dagster, lancedb, pyarrow or pydantic.
"""

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

from batch_pipeline.arguments import whole_number
from batch_pipeline.bench.embedding import device_budget, synchronize
from batch_pipeline.bench.embedding_contenders import model_config_of
from batch_pipeline.inference.batching import DEFAULT_MAX_BATCH_SIZE, PlanSettings
from batch_pipeline.inference.devices import default_threads
from batch_pipeline.inference.embedder import RunStats
from batch_pipeline.inference.models import load_tokenizer, resolve_model
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.stages.plan import plan_inputs
from batch_pipeline.text.chunk_pool import ChunkPool
from batch_pipeline.text.chunking import ChunkSettings

HANDBOOK = Path(__file__).resolve().parents[2] / "data" / "handbook"
DOCS_PER_BATCH = 64


def corpus(copies: int) -> list[dict]:
    docs = []
    pages = sorted(HANDBOOK.rglob("*.md"))
    if not pages:  # a benchmark over nothing would report a rate of nothing
        raise SystemExit(f"bench.end_to_end: no handbook pages under {HANDBOOK}")
    for copy in range(copies):
        for path in pages:
            doc_id = f"copy-{copy:03d}/{path.relative_to(HANDBOOK).as_posix()}"
            title = f"{path.stem.replace('-', ' ').capitalize()} (edition {copy + 1})"
            docs.append(
                {"doc_id": doc_id, "text": path.read_text(), "format": "markdown", "title": title}
            )
    return docs


def run(args: argparse.Namespace) -> dict:
    model = resolve_model(model_config_of(args))
    runner = EmbeddingRunner(model, device=args.device, dtype=args.dtype)
    settings = ChunkSettings(max_tokens=256, overlap_tokens=32)
    docs = corpus(args.copies)
    workers = args.workers or default_threads()
    runner.embed(["warm-up: kernels, allocator and the dtype decision"] * 64)
    synchronize(runner.device)

    started = time.perf_counter()
    inputs: list[tuple[str, str, int, list[int]]] = []  # (input hash, text, tokens, token ids)
    batches = [docs[i : i + DOCS_PER_BATCH] for i in range(0, len(docs), DOCS_PER_BATCH)]
    with ChunkPool(partial(load_tokenizer, model.path), settings, workers) as pool:
        results = []
        for number, batch in enumerate(batches):
            results.extend(pool.submit(number, batch))
        results.extend(pool.drain())
    for _, _, chunked in results:
        for result in chunked:  # (title, chunks), or a failure with chunks None
            inputs += [(c[5], c[4], c[6], c[7]) for c in result[1] or []]
    prepared = time.perf_counter()

    unique, planned, summary = plan_inputs(
        [i[0] for i in inputs],
        [i[2] for i in inputs],
        PlanSettings(device_budget(runner, model), DEFAULT_MAX_BATCH_SIZE),
        model,
    )
    planned_at = time.perf_counter()

    stats = RunStats()
    texts = [inputs[i][1] for i in unique]
    token_ids = [inputs[i][3] for i in unique]
    jobs = (
        (b.indices, [texts[i] for i in b.indices], [token_ids[i] for i in b.indices])
        for b in planned
    )
    for _ in runner.run(jobs, stats):
        pass
    synchronize(runner.device)
    executed = time.perf_counter()

    seconds = {
        "prepare": prepared - started,
        "plan": planned_at - prepared,
        "execute": executed - planned_at,
    }
    bound = max(seconds, key=seconds.get)
    return {
        "documents": len(docs),
        "chunks": len(inputs),
        "inputs_planned": summary.inputs,
        "tokens": stats.tokens,
        "device": runner.device,
        "dtype": runner.dtype,
        "prepare_workers": workers,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "end_to_end_seconds": round(executed - started, 3),
        "prepare_docs_per_second": round(len(docs) / seconds["prepare"], 1),
        "plan_inputs_per_second": round(len(inputs) / max(seconds["plan"], 1e-9), 1),
        "execute_inputs_per_second": round(stats.inputs / max(seconds["execute"], 1e-9), 1),
        "end_to_end_docs_per_second": round(len(docs) / (executed - started), 1),
        "bound_by": bound,
        "bound_share": round(seconds[bound] / (executed - started), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batch_pipeline.bench.end_to_end")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument(
        "--copies", type=whole_number(1), default=20, help="handbook copies (100 docs each)"
    )
    parser.add_argument("--workers", type=whole_number(1), default=None, help="prepare processes")
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args(argv)
    result = run(args)
    s = result["seconds"]
    print(
        f"{result['documents']} docs, {result['chunks']} chunks on {result['device']} "
        f"({result['dtype']}), {result['prepare_workers']} prepare workers: prepare "
        f"{s['prepare']}s ({result['prepare_docs_per_second']} docs/s), plan {s['plan']}s, "
        f"execute {s['execute']}s ({result['execute_inputs_per_second']} inputs/s); end to end "
        f"{result['end_to_end_seconds']}s, bound by {result['bound_by']} "
        f"({result['bound_share']:.0%})"
    )
    print(json.dumps(result, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
