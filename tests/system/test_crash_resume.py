"""Resume after a crash: a real subprocess is SIGKILLed mid-execute and mid-land, then rerun.

The kill points are injected (FAKE fault: `BATCH_PIPELINE_CRASH_AT`), the kill is real SIGKILL.
"""

import json
import signal
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import sqlalchemy as sa

from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.runs.request import RunRequest
from batch_pipeline.stages import execute
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.staging import read_table
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.tracking.schema import leases
from batch_pipeline.state.vector_store import VectorStore
from tests.support import cli_command, index_of, many_articles, pipeline_env, write_config

CHECKPOINT_EVERY = 2
MAX_BATCH = 8


def run_cli(
    config: Path, home: Path, crash_at: str | None = None, crash_signal: str | None = None
) -> subprocess.CompletedProcess:
    env = pipeline_env(config, home)
    env.pop("BATCH_PIPELINE_CRASH_AT", None)
    env.pop("BATCH_PIPELINE_CRASH_SIGNAL", None)
    if crash_at:
        env["BATCH_PIPELINE_CRASH_AT"] = crash_at
    if crash_signal:
        env["BATCH_PIPELINE_CRASH_SIGNAL"] = crash_signal
    return subprocess.run(
        cli_command(
            "run",
            "--collection",
            "handbook",
            "--json",
            "--dtype",
            "float32",
            "--checkpoint-every",
            str(CHECKPOINT_EVERY),
            "--max-batch-size",
            str(MAX_BATCH),
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def table_state(home: Path, index: str) -> dict[str, tuple]:
    table = VectorStore(str(home / "lancedb")).open(index)
    rows = (
        table.search().select(["chunk_id", "doc_id", "input_hash", "vector"]).limit(None).to_list()
    )
    assert len(rows) == len({r["chunk_id"] for r in rows}), "duplicate chunk ids"
    return {r["chunk_id"]: (r["doc_id"], r["input_hash"], np.asarray(r["vector"])) for r in rows}


def assert_same_index(home: Path, index: str, reference: dict[str, tuple]) -> None:
    state = table_state(home, index)
    assert state.keys() == reference.keys()
    for chunk_id, (doc_id, input_hash, vector) in reference.items():
        assert state[chunk_id][:2] == (doc_id, input_hash)
        np.testing.assert_allclose(state[chunk_id][2], vector, atol=1e-5)
    storage = resolve_storage(str(home))
    report = reconcile_index(
        VectorStore(storage.lancedb_uri), TrackingStore(storage.tracking_url), index
    )
    assert report.ok, report.metadata()


def test_kill_during_execute_and_during_land_then_retry(tmp_path):
    many_articles(tmp_path / "docs")
    config = write_config(tmp_path / "pipeline.yaml")

    clean_home = tmp_path / "clean"
    clean = run_cli(config, clean_home)
    assert clean.returncode == 0, clean.stderr
    total = json.loads(clean.stdout)["execute"]["inputs_embedded"]
    assert total > 4 * CHECKPOINT_EVERY * MAX_BATCH  # enough batches for several checkpoints
    index = index_of(config)
    reference = table_state(clean_home, index)

    # 1. killed right after the second execute checkpoint
    home = tmp_path / "home"
    crashed = run_cli(config, home, crash_at="execute:2")
    assert crashed.returncode == -signal.SIGKILL
    parts = list((home / "staging" / "handbook" / "checkpoints").rglob("part-*.parquet"))
    assert len(parts) == 2
    checkpointed = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    retried = run_cli(config, home)
    assert retried.returncode == 0, retried.stderr
    report = json.loads(retried.stdout)
    assert report["execute"]["inputs_resumed_from_checkpoint"] == checkpointed
    assert report["execute"]["inputs_embedded"] == total - checkpointed
    # land tells resumed vectors from fresh ones (it counted all as embedded before)
    assert report["land"]["chunks_resumed"] == checkpointed
    assert report["land"]["chunks_embedded"] == total - checkpointed
    # work lost to the crash is at most one checkpoint interval (here: none after a checkpoint)
    assert (
        checkpointed + report["execute"]["inputs_embedded"] <= total + CHECKPOINT_EVERY * MAX_BATCH
    )
    assert_same_index(home, index, reference)
    assert not list((home / "staging" / "handbook" / "checkpoints").rglob("part-*"))

    # 2. killed after the LanceDB commit, before the tracking store recorded it
    land_home = tmp_path / "land" / "home"
    land_home.parent.mkdir()
    write_config(land_home.parent / "pipeline.yaml", source=str(tmp_path / "docs"))
    crashed = run_cli(land_home.parent / "pipeline.yaml", land_home, crash_at="land:commit")
    assert crashed.returncode == -signal.SIGKILL
    assert TrackingStore(f"sqlite:///{land_home / 'tracking.db'}").document_count(index) == 0
    retried = run_cli(land_home.parent / "pipeline.yaml", land_home)
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["execute"]["inputs_embedded"] == 0  # rows were there
    assert_same_index(land_home, index, reference)
    # tracking and the rows agree on which run landed what, and every run id is known
    tracking = TrackingStore(f"sqlite:///{land_home / 'tracking.db'}")
    rows = VectorStore(str(land_home / "lancedb")).scan(index, ["doc_id", "run_id"]).to_pylist()
    row_runs = {r["doc_id"]: r["run_id"] for r in rows}
    tracked = {d: doc.run_id for d, doc in tracking.landed_documents(index).items()}
    assert tracked == row_runs  # tracking credited the recovery run before
    (crashed_run,) = set(row_runs.values())
    assert tracking.runs_with_id(crashed_run)  # "unknown run id" before
    invalidated = subprocess.run(
        cli_command("invalidate-run", crashed_run),
        env=pipeline_env(land_home.parent / "pipeline.yaml", land_home),
        capture_output=True,
        text=True,
    )
    assert invalidated.returncode == 0, invalidated.stderr
    assert f"{len(rows)} rows" in invalidated.stdout


def _stages_to_plan(pipeline, run_id: str):
    collected = pipeline.collect(run_id)
    chunks = pipeline.prepare(run_id, collected.path)
    plan = pipeline.plan(run_id, chunks.path, ExecuteOptions(PlanSettings(max_batch_size=4)))
    return collected, chunks, plan


def test_landing_removes_only_the_checkpoints_it_used(make_pipeline, runner):
    """Two runs of one partition at once: the first to land must not pull the checkpoint
    folder from under the other, which is still executing (seen in CI as a failed rename)."""
    pipeline = make_pipeline()
    collected, chunks, plan = _stages_to_plan(pipeline, "run-a")
    embeddings = pipeline.execute(
        "run-a", plan.path, lambda: runner, ExecuteOptions(checkpoint_every=1)
    )
    # run-b started executing meanwhile and has checkpointed a part of its own
    in_progress = pipeline.checkpoint_dir() / "run-b-writer" / "part-0.parquet"
    in_progress.write_table(read_table(embeddings.path).slice(0, 2))
    ours = {info.path.split("/")[-2] for info in pipeline.checkpoint_dir().files(recursive=True)}
    assert len(ours) == 2  # run-a's own folder, and run-b's

    pipeline.land_stage(RunRequest("run-a"), collected.path, chunks.path, embeddings.path)

    left = pipeline.checkpoint_dir().files(recursive=True)
    assert [info.path for info in left] == [in_progress.path]


def test_checkpoints_removed_while_resuming_are_embedded_instead(
    make_pipeline, runner, monkeypatch
):
    pipeline = make_pipeline()
    _, _, plan = _stages_to_plan(pipeline, "run-1")
    first = pipeline.execute("run-1", plan.path, lambda: runner, ExecuteOptions(checkpoint_every=1))
    expected = read_table(first.path, ["input_hash"])["input_hash"].to_pylist()
    assert pipeline.checkpoint_dir().files(recursive=True)  # run-1 was "killed" before land

    # FAKE fault: a concurrent run lands and removes those checkpoints just as run-2 reads them
    original = execute.read_batches

    def read_after_removal(path, *args, **kwargs):
        if "checkpoints" in str(path):
            pipeline.checkpoint_dir().delete()
        return original(path, *args, **kwargs)

    monkeypatch.setattr(execute, "read_batches", read_after_removal)
    collected, chunks, plan = _stages_to_plan(pipeline, "run-2")
    second = pipeline.execute(
        "run-2", plan.path, lambda: runner, ExecuteOptions(checkpoint_every=1)
    )

    assert second.summary.resumed_inputs == 0
    assert second.summary.stats.inputs == len(expected)  # embedded instead
    got = read_table(second.path, ["input_hash", "vector"])
    assert sorted(got["input_hash"].to_pylist()) == sorted(expected)
    landed = pipeline.land_stage(
        RunRequest("run-2"), collected.path, chunks.path, second.path
    ).summary
    assert not landed.failures
    assert reconcile_index(pipeline.store, pipeline.tracking, pipeline.index).ok


def test_a_failed_runs_stage_files_outlive_later_runs(make_pipeline, runner):
    """Re-executing a failed run from its failure reads its stage files: pruning keeps them."""
    pipeline = make_pipeline()
    _stages_to_plan(pipeline, "failed-run")  # it stopped after plan
    for n in range(pipeline.config.maintenance.staging_runs_kept + 1):
        pipeline.run(f"later-{n}", runner)
    runs = {p.name for p in pipeline.staging.root.local_path.joinpath("handbook").iterdir()}
    assert "failed-run" in runs
    assert "later-0" not in runs  # landed and older than the newest three: pruned


def test_sigterm_in_execute_says_so_releases_the_lease_and_the_rerun_resumes(tmp_path):
    """SIGTERM exited 143 within 0.14 s, printing nothing, and left the partition's lease to
    be taken over when it expired. Now the run says what happened, releases the lease on the
    way out, and the next run resumes from execute's checkpoints."""
    many_articles(tmp_path / "docs")
    config = write_config(tmp_path / "pipeline.yaml")
    home = tmp_path / "home"
    stopped = run_cli(config, home, crash_at="execute:2", crash_signal="SIGTERM")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "batch-pipeline: stopped by SIGTERM; what landed stays" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    tracking = TrackingStore(resolve_storage(str(home)).tracking_url)
    with tracking.engine.connect() as conn:
        assert conn.execute(sa.select(leases)).all() == []  # released, not left to expire
    retried = run_cli(config, home)
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["execute"]["inputs_resumed_from_checkpoint"] > 0
