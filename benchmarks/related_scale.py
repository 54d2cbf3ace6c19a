"""Related documents' first build at scale: seconds and peak RSS as the collection grows.

    python benchmarks/related_scale.py --copies 20 [--dir D]     # 2,000 pages

The sample handbook's 100 pages (their "Related articles" left out) and `copies - 1` copies
of each, every copy with a line of its own (`copy-NN/...`), indexed by the real
all-MiniLM-L6-v2 and then given their related documents (`k: 5`, `candidates: 20`, no
reranker: the candidates' own scores, so the time is the product's own: one hybrid query per
page, the pairs, the land). The copies crowd each page's candidates, so link recall means
nothing here; `python -m batch_pipeline.bench.related` measures quality. Run one size per
process: the peak RSS printed is the whole process's (the index run included).
"""

import argparse
import json
import resource
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=20, help="of each of the 100 pages")
    parser.add_argument("--dir", type=Path, help="where to build (default: a temporary one)")
    args = parser.parse_args()

    from batch_pipeline.bench.related import build, prepared_set

    work = args.dir or Path(tempfile.mkdtemp(prefix="related-scale-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    docs, links = prepared_set(
        REPO / "data" / "handbook", "Related articles", work / "set", strip=True
    )
    originals = sorted(docs.rglob("*.md"))
    for n in range(1, args.copies):
        for page in originals:
            target = docs / f"copy-{n:02d}" / page.relative_to(docs)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(page.read_text() + f"\n\nCopy {n} of this page.\n")
    pages = sum(1 for _ in docs.rglob("*.md"))
    figures = build(
        "handbook",
        docs,
        links,
        work / "home",
        argparse.Namespace(k=5, candidates=20, reranker=None),
    )
    print(
        json.dumps(
            {
                "pages": pages,
                "indexed_seconds": round(figures["indexed_seconds"], 1),
                "related_seconds": round(figures["related_seconds"], 1),
                "ms_per_page": round(1000 * figures["related_seconds"] / pages, 1),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            }
        )
    )


if __name__ == "__main__":
    main()
