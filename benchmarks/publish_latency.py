"""Publish latency: from a document edit to its landing, through a real dagster-daemon.

    python benchmarks/publish_latency.py [--edits 10] [--min-gap 3] [--max-gap 20] [--seed 7]
        [--instance shipped|bare] [--config-extra YAML]

Builds a small collection in a temporary folder with the default sensor settings (or those of
`--config-extra`), starts `dagster-daemon run -m batch_pipeline.definitions` on a temporary
Dagster instance, waits for the first run to land, then edits one document at a time at random
intervals. Latency is read from the tracking store: the edited version's `landed_at` minus the
moment of the edit. Prints p50, p95 and max, where each run's time went (queued, worker
start, stages), and a JSON line; exits 1 if an edit never lands. Each run is a real run worker
process (it imports torch and loads the model).

The instance is SQLite-backed, with the run coordinator, concurrency, sensor and retention
settings of the shipped `deploy/dagster.yaml` (`--instance shipped`, the default) or Dagster's
defaults (`--instance bare`: the queue is looked at every 5 s, sensors one after another).
"""

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from batch_pipeline.config import load_config  # noqa: E402
from batch_pipeline.index.partition import configured_generations  # noqa: E402
from batch_pipeline.state.tracking import TrackingStore  # noqa: E402
from batch_pipeline.text.documents import content_hash  # noqa: E402
from tests.support import dagster_daemon  # noqa: E402


def write_collection(root: Path, count: int) -> None:
    root.mkdir(parents=True)
    for n in range(count):
        (root / f"page-{n:02d}.md").write_text(
            f"# Page {n}\n\n## Overview\n\nPage {n} explains one feature of the product.\n"
        )


def landed_hash(tracking: TrackingStore, index: str, doc_id: str) -> tuple[str, float] | None:
    doc = tracking.landed_documents(index, [doc_id]).get(doc_id)
    return (doc.content_hash, doc.landed_at) if doc else None


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=10)
    parser.add_argument("--min-gap", type=float, default=3.0, help="seconds between edits, min")
    parser.add_argument("--max-gap", type=float, default=20.0, help="seconds between edits, max")
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=300.0, help="per edit, seconds")
    parser.add_argument("--config-extra", default="", help="YAML appended to the config")
    parser.add_argument("--instance", choices=["shipped", "bare"], default="shipped")
    parser.add_argument("--keep", action="store_true", help="keep the instance and logs")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    work = Path(tempfile.mkdtemp(prefix="publish-latency-"))
    docs, home, dagster_home = work / "docs", work / "home", work / "dagster_home"
    write_collection(docs, args.documents)
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text(instance_yaml(args.instance))
    config = work / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: latency\n    source: {kind: filesystem, path: docs}\n"
        + args.config_extra
    )
    settings = load_config(config).sensor
    env = {
        **os.environ,
        "BATCH_PIPELINE_CONFIG": str(config),
        "BATCH_PIPELINE_HOME": str(home),
        "DAGSTER_HOME": str(dagster_home),
        "HF_HUB_OFFLINE": "1",
    }
    index = configured_generations(load_config(config))["latency"]
    latencies: list[float] = []
    with dagster_daemon(env, work / "daemon.log"):
        deadline = time.time() + args.timeout
        tracking = None
        while time.time() < deadline:  # the first full run lands every page
            if (home / "tracking.db").exists():
                tracking = tracking or TrackingStore(f"sqlite:///{home / 'tracking.db'}")
                if tracking.document_count(index) == args.documents:
                    break
            time.sleep(1)
        else:
            print("the first run did not land; see", work / "daemon.log", file=sys.stderr)
            return 1
        print(
            f"window {settings.window_seconds} s, sensor every {settings.interval_seconds} s; "
            f"{args.edits} edits, {args.min_gap:g}-{args.max_gap:g} s apart",
            flush=True,
        )
        waiting: dict[str, tuple[str, float]] = {}  # doc id -> (content hash, edit time)
        for n in range(args.edits):
            time.sleep(rng.uniform(args.min_gap, args.max_gap))
            doc_id = f"page-{rng.randrange(args.documents):02d}.md"
            while doc_id in waiting:
                doc_id = f"page-{rng.randrange(args.documents):02d}.md"
            data = f"# Page {doc_id}\n\nEdit {n}: this page was rewritten.\n".encode()
            edited_at = time.time()
            (docs / doc_id).write_bytes(data)
            waiting[doc_id] = (content_hash(data), edited_at)
            landed_now = _collect(tracking, index, waiting, latencies)
            for doc, latency in landed_now:
                print(f"  {doc}: landed {latency:.1f} s after its edit", flush=True)
        deadline = time.time() + args.timeout
        while waiting and time.time() < deadline:
            time.sleep(0.5)
            for doc, latency in _collect(tracking, index, waiting, latencies):
                print(f"  {doc}: landed {latency:.1f} s after its edit", flush=True)
        # stopping the daemon while a run is in flight would cut it short
        runs = finished_runs(dagster_home, time.time() + 120)
    if waiting:
        print(f"{len(waiting)} edits never landed; see {work / 'daemon.log'}", file=sys.stderr)
        return 1
    print("runs after the first (seconds): queued, worker start, stages")
    for queued, start, stages in runs[1:]:
        print(f"  {queued:5.1f} {start:5.1f} {stages:5.1f}")
    result = {
        "instance": args.instance,
        "edits": len(latencies),
        "runs": len(runs) - 1,
        "window_seconds": settings.window_seconds,
        "interval_seconds": settings.interval_seconds,
        "p50_seconds": round(statistics.median(latencies), 1),
        "p95_seconds": round(percentile(latencies, 0.95), 1),
        "max_seconds": round(max(latencies), 1),
        "target_p95_seconds": settings.window_seconds + 20,
    }
    print(
        f"edit -> landed: p50 {result['p50_seconds']} s, p95 {result['p95_seconds']} s, "
        f"max {result['max_seconds']} s (target p95 <= {result['target_p95_seconds']} s)"
    )
    print(json.dumps(result))
    if args.keep:
        print(f"kept: {work} (DAGSTER_HOME={dagster_home})")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def instance_yaml(kind: str) -> str:
    """A SQLite instance, with the shipped queue, concurrency, sensor and retention settings."""
    config: dict = {"telemetry": {"enabled": False}}
    if kind == "shipped":
        shipped = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
        keys = ("run_coordinator", "concurrency", "sensors", "retention")
        config |= {k: shipped[k] for k in keys}
    return yaml.safe_dump(config)


def finished_runs(dagster_home: Path, deadline: float) -> list[tuple[float, float, float]]:
    """Once no run is in flight: each run's seconds queued (enqueued to starting), worker
    start (starting to the first step) and stages (first step to success), oldest first."""
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        while time.time() < deadline and any(not run.is_finished for run in instance.get_runs()):
            time.sleep(0.5)
        timings = []
        for run in reversed(instance.get_runs()):
            times: dict[str, float] = {}
            for record in instance.all_logs(run.run_id):
                kind = record.dagster_event_type
                if kind is not None and kind.value not in times:
                    times[kind.value] = record.timestamp
            if {"PIPELINE_ENQUEUED", "PIPELINE_STARTING", "STEP_START"} <= set(times):
                end = times.get("PIPELINE_SUCCESS", times.get("PIPELINE_FAILURE", 0.0))
                timings.append(
                    (
                        times["PIPELINE_STARTING"] - times["PIPELINE_ENQUEUED"],
                        times["STEP_START"] - times["PIPELINE_STARTING"],
                        end - times["STEP_START"],
                    )
                )
        return timings


def _collect(tracking, index, waiting, latencies):  # noqa: ANN001,ANN202
    """The waiting edits that have landed since the last look, with their latency."""
    landed = []
    for doc_id, (digest, edited_at) in list(waiting.items()):
        found = landed_hash(tracking, index, doc_id)
        if found is not None and found[0] == digest:
            latencies.append(found[1] - edited_at)
            landed.append((doc_id, found[1] - edited_at))
            del waiting[doc_id]
    return landed


if __name__ == "__main__":
    sys.exit(main())
