"""Retrieval quality by search mode: recall@k, MRR@k and nDCG@10 of vector, text (BM25) and
hybrid search on labelled sets, and of hybrid search reranked, ranked as `search` and the
generation gate rank them.

    python -m batch_pipeline.bench.retrieval [--cranfield DIR] [--no-handbook]
        [--reranker judge|DIR] [--candidates 30] [--questions] [--int8] [--json-out F]

- The handbook: the sample's 100 pages and its 38 queries (written here).
- Cranfield (`--cranfield DIR`, a folder with `cran.all.1400`, `cran.qry` and `cranqrel`:
  `fetch github:noramtboraas/information-retrieval`): 1,398 aeronautics abstracts and 225
  queries with relevance judgments, a classic public test collection, nobody's here. Every
  judged document (relevance 1 to 4) counts as relevant. Queries are numbered by their order
  in `cran.qry`, as `cranqrel` numbers them.

Each set is built by the pipeline (collect to land, the real all-MiniLM-L6-v2) in a fresh home
under `--dir`; the figures are measured in this one run. With `--questions` each set's briefs
are generated too (the shipped chat model, in this process: minutes for the handbook, about
half an hour for Cranfield on two cores) and each mode is scored again with their question
rows. With `--reranker` (`judge`: the shipped chat model as a yes/no judge; or a
cross-encoder folder you have) a `hybrid+rerank` row is added: each query's hybrid top
`--candidates` chunks reordered by the reranker, as `search --rerank` and the reranker's
review rank them. With `--int8` each set is built a second time under `model.precision:
fixed_accuracy` on OpenVINO's int8 model (`dtype: int8`, calibrated on the set's own inputs as
a first run pins them) and scored the same way, with each score's difference from the
faithful build's.
"""

import argparse
import json
import re
import shutil
import tempfile
import time
from pathlib import Path

from batch_pipeline.state.retrieval import MODES

REPO = Path(__file__).resolve().parents[2]
CUTS = (5, 10)


def cranfield(source: Path, out: Path) -> tuple[Path, Path]:
    """Cranfield as a folder of Markdown pages and an evaluation set: (docs, eval.jsonl)."""
    docs = out / "docs"
    docs.mkdir(parents=True)
    fields = re.compile(r"^\.([ITABW])(?:\s+(\d+))?\s*$")

    def records(path: Path) -> list[dict[str, str]]:
        found, current, field = [], None, None
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            match = fields.match(line)
            if match and match[1] == "I":
                current = {"id": match[2]}
                found.append(current)
                field = None
            elif match:
                field = match[1]
            elif current is not None and field is not None:
                current[field] = (current.get(field, "") + " " + line.strip()).strip()
        return found

    kept = set()
    for doc in records(source / "cran.all.1400"):
        text = doc.get("W", "").strip()
        if not text:
            continue  # two of the 1,400 have no abstract
        title = doc.get("T", "").strip() or f"document {doc['id']}"
        (docs / f"{doc['id']}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
        kept.add(doc["id"])
    relevant: dict[int, set[str]] = {}
    for line in (source / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] in kept and 1 <= int(parts[2]) <= 4:
            relevant.setdefault(int(parts[0]), set()).add(f"{parts[1]}.md")
    eval_path = out / "eval.jsonl"
    with eval_path.open("w", encoding="utf-8") as lines:
        for number, query in enumerate(records(source / "cran.qry"), start=1):
            if relevant.get(number):
                item = {"query": query.get("W", ""), "relevant": sorted(relevant[number])}
                lines.write(json.dumps(item) + "\n")
    return docs, eval_path


def build(name: str, docs: Path, eval_path: Path, home: Path, extra: str = "") -> object:
    """The collection, built by the pipeline into `home`: its IndexPartition."""
    from batch_pipeline.config import load_config
    from batch_pipeline.index.product import open_partition
    from batch_pipeline.state.storage import resolve_storage

    config = home.parent / f"{name}.yaml"
    config.write_text(
        f"collections:\n  - name: {name}\n"
        f"    source: {{kind: filesystem, path: {docs}}}\n"
        f"    chunking: {{max_tokens: 256, overlap_tokens: 32}}\n"
        f"    evaluation: {{path: {eval_path}, k: 5}}\n{extra}"
    )
    loaded = load_config(config)
    return open_partition(loaded, resolve_storage(str(home)), name)


def scores(pipeline, runner, also: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:  # noqa: ANN001
    from batch_pipeline.generations.evaluation import load_eval_set, score_generation

    queries = load_eval_set(pipeline.collection.evaluation.path)
    prefix = pipeline.model.query_prefix
    found: dict[str, dict[str, float]] = {}
    for mode in MODES:
        found[mode] = {}
        for k in CUTS:
            measured = score_generation(
                pipeline.store, pipeline.index, runner, queries, k, prefix, also, mode
            )
            found[mode] |= {key: value for key, value in measured.items() if key != "queries"}
        found[mode]["queries"] = len(queries)
    return found


def rerank_scores(pipeline, runner, reranker: str, candidates: int) -> dict[str, float]:  # noqa: ANN001
    """Hybrid search's top `candidates` rows reordered by `reranker`, ranked at 5 and 10."""
    from batch_pipeline.config import RerankerConfig
    from batch_pipeline.generations.evaluation import load_eval_set, ranking_scores
    from batch_pipeline.index.reranker import (
        documents_of,
        hybrid_candidates,
        open_scorer,
        reranked,
    )

    queries = load_eval_set(pipeline.collection.evaluation.path)
    rows = hybrid_candidates(pipeline.product, queries, lambda model: runner, candidates)
    config = RerankerConfig(model=reranker, candidates=candidates)
    scorer = open_scorer(config, pipeline.storage.home)
    began = time.perf_counter()
    ranked = [
        documents_of(reranked(r, q.query, scorer)) for q, r in zip(queries, rows, strict=True)
    ]
    seconds = time.perf_counter() - began
    print(f"  reranked {scorer.stats.pairs:,} pairs in {seconds:.0f} s", flush=True)
    found: dict[str, float] = {}
    for k in CUTS:
        found |= ranking_scores(ranked, queries, k)
    return found


def print_table(title: str, found: dict[str, dict[str, float]]) -> None:
    print(f"\n{title} ({next(iter(found.values()))['queries']} queries)")
    print(
        f"  {'mode':<14} {'recall@5':>9} {'MRR@5':>7} {'recall@10':>10} {'MRR@10':>7} "
        f"{'nDCG@10':>8}"
    )
    for mode, values in found.items():
        print(
            f"  {mode:<14} {values['recall_at_5']:>9.3f} {values['mrr_at_5']:>7.3f} "
            f"{values['recall_at_10']:>10.3f} {values['mrr_at_10']:>7.3f} "
            f"{values['ndcg_at_10']:>8.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cranfield", type=Path, help="folder with cran.all.1400, ...")
    parser.add_argument("--no-handbook", action="store_true")
    parser.add_argument("--questions", action="store_true", help="briefs and question rows too")
    parser.add_argument("--int8", action="store_true", help="and each set built in int8")
    parser.add_argument("--reranker", help="judge, or a cross-encoder folder: hybrid+rerank")
    parser.add_argument("--candidates", type=int, default=30, help="rows the reranker reorders")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)

    from batch_pipeline.inference.runner import EmbeddingRunner
    from batch_pipeline.names import question_index

    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    report: dict[str, object] = {}
    sets = []
    if not args.no_handbook:
        sets.append(("handbook", REPO / "data" / "handbook", REPO / "data" / "handbook_eval.jsonl"))
    if args.cranfield:
        docs, eval_path = cranfield(args.cranfield, work / "cranfield-source")
        sets.append(("cranfield", docs, eval_path))
    for name, docs, eval_path in sets:
        extra = ""
        if args.questions:
            extra = (
                f"    briefs: {{prompt: {REPO / 'data' / 'brief_prompt.yaml'}, output_schema: "
                f"{REPO / 'data' / 'brief_schema.json'}, document_tokens: 768, max_tokens: 512, "
                "index_questions: true}\n"
            )
        pipeline = build(name, docs, eval_path, work / name, extra)
        runner = EmbeddingRunner(pipeline.model)
        began = time.perf_counter()
        pipeline.run("bench", runner)
        pipeline.product.review(lambda model, runner=runner: runner)
        chunks = pipeline.store.count_rows(pipeline.index)
        seconds = time.perf_counter() - began
        print(f"{name}: built in {seconds:.0f} s ({chunks:,} chunks)", flush=True)
        found = scores(pipeline, runner)
        if args.reranker:
            found["hybrid+rerank"] = rerank_scores(pipeline, runner, args.reranker, args.candidates)
        print_table(f"{name}, chunks only", found)
        report[name] = {"chunks": found}
        if args.int8:
            report[name]["int8"] = int8_scores(name, docs, eval_path, work, found)
        if args.questions:
            questions = question_rows(pipeline, runner)
            with_questions = scores(pipeline, runner, (question_index(pipeline.index),))
            print_table(f"{name}, with {questions} question rows", with_questions)
            report[name]["with_questions"] = with_questions
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2))
    return 0


def int8_scores(
    name: str, docs: Path, eval_path: Path, work: Path, faithful: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """The set built again under `model.precision: fixed_accuracy` on the int8 model, its
    scores printed beside their differences from the faithful build's `faithful`."""
    from batch_pipeline.inference.runner import EmbeddingRunner

    pipeline = build(
        f"{name}", docs, eval_path, work / f"{name}-int8", "model: {precision: fixed_accuracy}\n"
    )
    runner = EmbeddingRunner(
        pipeline.model,
        "cpu",
        "int8",
        backend="openvino",
        export_cache=work / f"{name}-int8" / "openvino",
    )
    began = time.perf_counter()
    pipeline.run("bench-int8", runner)
    print(
        f"{name} in int8: built in {time.perf_counter() - began:.0f} s "
        f"(quantized in {runner.export_seconds:.0f} s)",
        flush=True,
    )
    found = scores(pipeline, runner)
    print_table(f"{name}, int8 (fixed_accuracy)", found)
    print("  difference from the faithful build:")
    for mode, values in found.items():
        print(
            f"  {mode:<8} "
            + " ".join(
                f"{values[k] - faithful[mode][k]:>+{w}.3f}"
                for k, w in (
                    ("recall_at_5", 9),
                    ("mrr_at_5", 7),
                    ("recall_at_10", 10),
                    ("mrr_at_10", 7),
                    ("ndcg_at_10", 8),
                )
            )
        )
    return found


def question_rows(pipeline, runner) -> int:  # noqa: ANN001
    """The handbook's briefs generated (the shipped chat model) and their question rows
    landed beside the index: how many."""
    from batch_pipeline.briefs.kind import brief_product
    from batch_pipeline.names import question_index

    product = brief_product(
        pipeline.config,
        pipeline.storage,
        pipeline.name,
        pipeline.tracking,
        pipeline.store,
        lambda key: pipeline,
    )
    product.partition(pipeline.name).run("bench-briefs", lambda: product.generator)
    review = product.review(lambda model: runner)
    if product.registry.live(product.name) is None:  # refused: measured all the same
        print(
            f"{product.name}: the gate refused it ({review.reason}); promoted here to score "
            "its question rows",
            flush=True,
        )
        product.registry.promote(product.name, product.fingerprint, "benchmark", actor="bench")
    product.land_questions(lambda model: runner, "bench-briefs")
    return pipeline.store.count_rows(question_index(pipeline.index))


if __name__ == "__main__":
    raise SystemExit(main())
