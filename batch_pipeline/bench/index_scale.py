"""The ANN index at scale: query latency of a flat scan against each ANN index type, the ANN's
recall@10 against the exact (flat) answer, and what a build and an incremental fold cost.

    python -m batch_pipeline.bench.index_scale [--rows 1000000] [--queries 200]
        [--types IVF_HNSW_SQ,IVF_PQ] [--dir /tmp/index-scale] [--json-out F]

The vectors are synthetic: unit vectors of the model's width (384) drawn around 2,000 random
centres, so that neighbourhoods exist as they do among real chunks (uniform random vectors
have none, and no ANN index finds their neighbours). Embedding a million real chunks takes
hours on a CPU; what the index does with them depends on their distribution, which this
imitates and does not reproduce. The queries are drawn the same way. Each figure is measured
in this one run, through LanceDB as search runs it (cosine, `limit(10)`), one query at a time:

- flat: every row scanned (`bypass_vector_index`), the exact answer;
- each type: built with the settings `index.vector` uses, then queried at each search setting
  of `--sweep` (`nprobes`: IVF partitions probed; `refine_factor`: candidates re-ranked by
  their full vectors); its recall@10 is the share of the exact top 10 it returns;
- fold: 1% more rows appended, and the seconds `optimize` takes to fold them in.

Peak memory is the process's maximum RSS after each step (it only grows: read the increase).
"""

import argparse
import json
import resource
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

DIM = 384
CENTRES = 2000
SPREAD = 0.35  # noise around a centre, against unit-length centres: neighbourhoods overlap
K = 10


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def unit_vectors(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    picked = centres[rng.integers(0, len(centres), n)]
    vectors = picked + rng.standard_normal((n, DIM)).astype(np.float32) * SPREAD / np.sqrt(DIM)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def batch(vectors: np.ndarray, offset: int, extra: bool = False) -> pa.Table:
    ids = [f"c{offset + i}" for i in range(len(vectors))]
    flat = pa.array(vectors.ravel(), type=pa.float32())
    return pa.table(
        {
            "chunk_id": ids,
            "extra": [extra] * len(ids),  # the fold's rows, removed after it
            "vector": pa.FixedSizeListArray.from_arrays(flat, DIM),
        }
    )


def latencies(run_query, queries: np.ndarray) -> tuple[list[list[str]], list[float]]:  # noqa: ANN001
    found, seconds = [], []
    for query in queries:
        began = time.perf_counter()
        rows = run_query(query)
        seconds.append(time.perf_counter() - began)
        found.append([r["chunk_id"] for r in rows])
    return found, seconds


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--types", default="IVF_HNSW_SQ,IVF_PQ")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/index-scale"))
    parser.add_argument("--json-out", type=Path)
    parser.add_argument(
        "--sweep",
        default="20:0,50:0,100:0,20:4,50:4",
        help="search settings tried on each index, nprobes:refine_factor (0: no refine)",
    )
    parser.add_argument("--reuse", action="store_true", help="keep the table --dir holds")
    args = parser.parse_args(argv)

    import lancedb
    from lancedb.index import HnswSq, IvfPq, IvfSq

    kinds = {"IVF_HNSW_SQ": HnswSq, "IVF_PQ": IvfPq, "IVF_SQ": IvfSq}
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    if not args.reuse:
        shutil.rmtree(args.dir, ignore_errors=True)
    db = lancedb.connect(str(args.dir))
    began = time.perf_counter()
    table = db.open_table("chunks") if args.reuse else None
    step = 100_000
    for offset in range(0, args.rows, step):  # a reused table's rows: drawn, not written
        rows = batch(unit_vectors(rng, centres, min(step, args.rows - offset)), offset)
        if args.reuse:
            continue
        table = db.create_table("chunks", rows) if table is None else table
        if offset:
            table.add(rows)
    write_seconds = time.perf_counter() - began
    queries = unit_vectors(rng, centres, args.queries)
    report: dict[str, object] = {
        "rows": args.rows,
        "dim": DIM,
        "queries": args.queries,
        "write_seconds": round(write_seconds, 1),
    }

    def flat(query: np.ndarray) -> list[dict]:
        search = table.search(query).metric("cosine").bypass_vector_index()
        return search.select(["chunk_id"]).limit(K).to_list()

    exact, seconds = latencies(flat, queries)
    report["flat"] = {
        "p50_ms": percentile(seconds, 50),
        "p95_ms": percentile(seconds, 95),
        "peak_rss_mib": peak_rss_mib(),
    }
    print(
        f"{args.rows:,} rows: flat p50 {report['flat']['p50_ms']:.1f} ms, "
        f"p95 {report['flat']['p95_ms']:.1f} ms",
        flush=True,
    )
    for name in [t for t in args.types.split(",") if t]:
        began = time.perf_counter()
        config = kinds[name](distance_type="cosine")
        table.create_index("vector", config=config, replace=True, name="vector_idx")
        build = time.perf_counter() - began
        settings = {}
        for setting in args.sweep.split(","):
            nprobes, refine = (int(part) for part in setting.split(":"))

            def ann(query: np.ndarray, nprobes: int = nprobes, refine: int = refine) -> list:
                search = table.search(query).metric("cosine").nprobes(nprobes)
                if refine:
                    search = search.refine_factor(refine)
                return search.select(["chunk_id"]).limit(K).to_list()

            ann(queries[0])  # the index's first load, outside the timer
            found, seconds = latencies(ann, queries)
            pairs = zip(found, exact, strict=True)
            recall = float(np.mean([len(set(f) & set(e)) / K for f, e in pairs]))
            p50, p95 = percentile(seconds, 50), percentile(seconds, 95)
            settings[setting] = {"p50_ms": p50, "p95_ms": p95, "recall_at_10": recall}
            print(
                f"  {name} nprobes {nprobes}, refine {refine or '-'}: p50 {p50:.1f} ms, "
                f"p95 {p95:.1f} ms, recall@10 {recall:.4f}",
                flush=True,
            )
        extra = batch(unit_vectors(rng, centres, args.rows // 100), args.rows, extra=True)
        table.add(extra)
        began = time.perf_counter()
        table.optimize()
        fold = time.perf_counter() - began
        table.delete("extra = true")
        result = {
            "build_seconds": round(build, 1),
            "settings": settings,
            "fold_1pct_seconds": round(fold, 2),
            "peak_rss_mib": peak_rss_mib(),
        }
        report[name] = result
        print(
            f"  {name}: built in {build:.1f} s; a 1% fold {fold:.2f} s; peak RSS "
            f"{result['peak_rss_mib']:,.0f} MiB",
            flush=True,
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
