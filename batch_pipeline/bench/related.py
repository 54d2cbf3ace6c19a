"""Related documents' quality: recall@k and MRR@k of the links pages already carry, among the
lists the product builds, on labelled corpora; and what an incremental run costs.

    python -m batch_pipeline.bench.related [--powershell DIR] [--no-handbook] [--k 5]
        [--candidates 20] [--reranker judge|DIR] [--dir D]

- The handbook: the sample's 100 pages; each page's "Related articles" section links three
  (written here, with no care for relatedness: a floor, not a target).
- PowerShell's cmdlet reference (`--powershell DIR`, the `reference/7.4` folder of
  `fetch github:MicrosoftDocs/PowerShell-Docs`, CC BY 4.0): 470 pages, of which 285 link
  related cmdlets' pages in their "RELATED LINKS" sections, written by the cmdlets' authors,
  nobody's here.

Every page is indexed without its links section, so the lists are found from what the pages
say, not from the links themselves.

Each set is built by the pipeline (the real all-MiniLM-L6-v2; the related documents' own
stages) in a fresh home under `--dir`. With `--reranker` the collection's reranker is
configured and promoted by hand, whatever its review says, to measure it.
"""

import argparse
import json
import re
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def without_section(text: str, heading: str) -> str:
    """`text` without the section under `heading` (any level, any case)."""
    out, skipping, level = [], False, 0
    for line in text.splitlines():
        match = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if match and skipping and len(match[1]) <= level:
            skipping = False
        if match and match[2].strip().lower() == heading.lower():
            skipping, level = True, len(match[1])
            continue
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def prepared_set(source: Path, heading: str, out: Path, strip: bool) -> tuple[Path, Path]:
    """The pages as a folder (the links section left out with `strip`) and their links."""
    from batch_pipeline.related.links import folder_links

    docs = out / "docs"
    for page in source.rglob("*.md"):
        target = docs / page.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = page.read_text(encoding="utf-8", errors="replace")
        target.write_text(without_section(text, heading) if strip else text, encoding="utf-8")
    links = out / "links.jsonl"
    found = folder_links(source, heading)
    links.write_text(
        "".join(json.dumps({"doc_id": d, "related": r}) + "\n" for d, r in found.items())
    )
    return docs, links


def build(name: str, docs: Path, links: Path, home: Path, args: argparse.Namespace) -> dict:
    """The collection indexed, its related documents built and reviewed: the figures."""
    from batch_pipeline.config import load_config
    from batch_pipeline.index.product import open_partition
    from batch_pipeline.inference.runner import EmbeddingRunner
    from batch_pipeline.products import product_env
    from batch_pipeline.related.kind import RELATED
    from batch_pipeline.state.storage import resolve_storage

    reranker = ""
    if args.reranker:
        queries = home.parent / f"{name}-queries.jsonl"  # the reranker's gate needs a set
        first = json.loads(links.read_text().splitlines()[0])
        queries.write_text(json.dumps({"query": first["doc_id"], "relevant": first["related"]}))
        reranker = (
            f"    evaluation: {{path: {queries}}}\n    reranker: {{model: {args.reranker}}}\n"
        )
    config_path = home.parent / f"{name}.yaml"
    config_path.write_text(
        f"collections:\n  - name: {name}\n"
        f"    source: {{kind: filesystem, path: {docs}, glob: '**/*.md'}}\n"
        f"    chunking: {{max_tokens: 256, overlap_tokens: 32}}\n"
        f"    related: {{k: {args.k}, candidates: {args.candidates}, "
        f"evaluation: {{path: {links}}}}}\n{reranker}"
    )
    config = load_config(config_path)
    storage = resolve_storage(str(home))
    index = open_partition(config, storage, name)
    runner = EmbeddingRunner(index.model)
    began = time.perf_counter()
    index.run("bench-index", runner)
    index.product.review(lambda model: runner)
    indexed = time.perf_counter() - began
    if args.reranker:
        generation = index.product.reranking.record()
        index.product.registry.promote(
            generation.product, generation.fingerprint, "benchmark", actor="bench"
        )
    env = product_env(config, storage, index.tracking, index.store)
    related = RELATED.open(env, RELATED.targets(config)[0])
    began = time.perf_counter()
    summaries = related.partition(name).run("bench-related", lambda: runner)
    built = time.perf_counter() - began
    review = related.product.review(lambda model: runner)
    scores = review.scores.get("candidate", {})
    execute = summaries["execute"]
    print(
        f"{name}: indexed in {indexed:.0f} s; {len(summaries['land'].summary.landed)} lists "
        f"of {args.k} from {args.candidates} candidates in {built:.0f} s "
        f"({execute.stats.pairs:,} pairs scored by {related.product.model.name})",
        flush=True,
    )
    print(
        f"  link recall@{args.k} {scores.get(f'link_recall_at_{args.k}', 0):.3f}, "
        f"MRR@{args.k} {scores.get(f'link_mrr_at_{args.k}', 0):.3f} over "
        f"{scores.get('documents', 0)} pages with links",
        flush=True,
    )
    return {"indexed_seconds": indexed, "related_seconds": built, **scores}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--powershell", type=Path, help="PowerShell-Docs' reference/7.4")
    parser.add_argument("--no-handbook", action="store_true")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--reranker", help="judge, or a cross-encoder folder")
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-related-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    report = {}
    if not args.no_handbook:
        docs, links = prepared_set(
            REPO / "data" / "handbook", "Related articles", work / "handbook-set", strip=True
        )
        report["handbook"] = build("handbook", docs, links, work / "handbook", args)
    if args.powershell:
        docs, links = prepared_set(
            args.powershell, "Related links", work / "powershell-set", strip=True
        )
        report["powershell"] = build("powershell", docs, links, work / "powershell", args)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
