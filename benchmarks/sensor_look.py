"""A folder sensor's looks at scale: time and memory of each look, in one process.

    python benchmarks/sensor_look.py [--files 200000] [--per-folder 100] [--looks 4]
        [--touch 10] [--json-out F]

Writes `--files` one-line files in folders of `--per-folder`, then runs the publish sensor's
decision (`evaluate_publish`, with its state files in a temporary staging folder, as the
sensor runs it) look after look: the first look (which hashes within `LOOK_SECONDS`), the looks
that fill in hashes, then `--looks` looks with `--touch` files rewritten before each. Prints
each look's seconds, its peak RSS over the RSS before the first look (the kernel's
high-water mark, reset before each look: `batch_pipeline/measures/memory.py`), and the size
of the state file it left.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from batch_pipeline.measures.memory import PeakRss, rss_bytes  # noqa: E402
from batch_pipeline.sources.base import LOOK_SECONDS  # noqa: E402
from batch_pipeline.sources.filesystem import FilesystemSource  # noqa: E402
from batch_pipeline.state.staging import as_stage_path  # noqa: E402
from batch_pipeline.triggers.publish import StateSnapshots, evaluate_publish  # noqa: E402


def write_files(root: Path, files: int, per_folder: int) -> None:
    for n in range(files):
        folder = root / f"f{n // per_folder:05d}"
        if n % per_folder == 0:
            folder.mkdir(parents=True)
        (folder / f"doc-{n:07d}.md").write_text(f"Document {n} says one thing.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--per-folder", type=int, default=100)
    parser.add_argument("--looks", type=int, default=4, help="looks after the hashes are in")
    parser.add_argument("--touch", type=int, default=10, help="files rewritten before each")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sensor-look-") as tmp:
        root, state = Path(tmp) / "docs", Path(tmp) / "state"
        started = time.perf_counter()
        write_files(root, args.files, args.per_folder)
        print(f"{args.files:,} files written in {time.perf_counter() - started:.1f} s")
        source = FilesystemSource(root, "**/*.md")
        snapshots = StateSnapshots(as_stage_path(state))
        base = rss_bytes() / 2**20
        cursor, looks, kind, later = None, [], "first", 0
        while later < args.looks:
            if kind == "later":
                for n in range(later * args.touch, (later + 1) * args.touch):
                    n = (n * 7919) % args.files  # spread over the folders
                    path = root / f"f{n // args.per_folder:05d}" / f"doc-{n:07d}.md"
                    path.write_text(f"Document {n} says another thing, look {later}.\n")
            with PeakRss() as peak:
                started = time.perf_counter()
                decision = evaluate_publish(
                    "kb",
                    source,
                    cursor,
                    time.time(),
                    window_seconds=0,
                    max_docs=10_000,
                    snapshots=snapshots,
                )
                seconds = time.perf_counter() - started
            cursor = decision.cursor
            state_bytes = sum(p.stat().st_size for p in state.iterdir())
            changed = sum(len(r.changed_doc_ids) for r in decision.runs)
            full = any(r.full for r in decision.runs)
            looks.append(
                {
                    "look": kind,
                    "seconds": round(seconds, 2),
                    "peak_mib": round(peak.peak / 2**20 - base),
                    "state_mib": round(state_bytes / 2**20, 1),
                    "runs": "full" if full else changed,
                }
            )
            print(
                f"{kind:>9} look: {seconds:6.2f} s, peak RSS +{looks[-1]['peak_mib']:5d} MiB, "
                f"state files {state_bytes / 2**20:5.1f} MiB, runs: {looks[-1]['runs']}"
            )
            if kind == "later":
                later += 1
            # a look that spent its hashing time left hashes to fill in: the next fills in
            kind = "fill-in" if kind != "later" and seconds >= LOOK_SECONDS else "later"
        highest = max(look["peak_mib"] for look in looks)
        print(f"highest look peak RSS +{highest} MiB (before the first look {base:.0f} MiB)")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps({"files": args.files, "looks": looks}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
