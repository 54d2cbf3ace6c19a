"""Every run records its measures in the tracking store: throughput, estimated cost from the
configured prices, wall-clock against its window, failure and retry figures. The figures are
checked against the run's own recorded numbers, never against a clock."""

import json
import time

import pytest

from batch_pipeline import cli
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import open_partition
from batch_pipeline.measures.run import MANUAL, SCHEDULE, SENSOR, RunMeasures
from batch_pipeline.state.storage import resolve_storage
from tests.support import write_config, write_corpus

PRICED = "cost: {device_hour: {cpu: 2.0, cuda: 7.0}, host_hour: 0.5, currency: EUR}\n"


def measures_of(pipeline: IndexPartition, run_id: str) -> tuple[dict, RunMeasures]:
    (row,) = [r for r in pipeline.tracking.runs_with_id(run_id)]
    measures = RunMeasures.from_record(row)
    assert measures is not None
    return row, measures


def test_cost_is_the_recorded_seconds_at_the_configured_price(
    workspace, make_pipeline, fake_embedder
):
    write_config(workspace["config"], extra=PRICED)
    pipeline = make_pipeline()
    landed = pipeline.run("run-1", fake_embedder)["land"]
    row, measures = measures_of(pipeline, "run-1")
    assert row["device_price_hour"] == 2.0  # the fake runs where the CPU price applies
    assert row["host_price_hour"] == 0.5 and row["currency"] == "EUR"
    assert row["inputs"] > 0 and row["execute_seconds"] > 0 and row["tokens"] > 0
    execute_cost = row["execute_seconds"] * 2.0 / 3600
    assert measures.cost_per_1k_inputs == pytest.approx(execute_cost / row["inputs"] * 1000)
    assert measures.cost_per_1m_tokens == pytest.approx(execute_cost / row["tokens"] * 1e6)
    wall = row["finished_at"] - row["started_at"]
    assert measures.run_cost == pytest.approx(wall * 0.5 / 3600)
    assert measures.inputs_per_second == pytest.approx(row["inputs"] / row["execute_seconds"])
    # what the Dagster UI plots is the same figure, from the same record
    metadata = landed.measures.metadata()
    assert metadata["cost_per_1k_inputs"] == pytest.approx(measures.cost_per_1k_inputs, abs=1e-6)
    assert metadata["currency"] == "EUR" and metadata["trigger"] == MANUAL


def test_what_a_run_pays_once_is_apart_from_its_marginal_rate(
    workspace, make_pipeline, fake_embedder, capsys
):
    write_config(workspace["config"], extra=PRICED)
    pipeline = make_pipeline()

    def slow_load():  # FAULT INJECTION: a model that takes 0.4 s to load
        time.sleep(0.4)
        return fake_embedder

    pipeline.run("run-1", slow_load)
    row, measures = measures_of(pipeline, "run-1")
    # the load is the run's fixed cost; the rate and cost per input are the marginal ones
    assert row["fixed_seconds"] >= 0.4 > row["execute_seconds"] > 0
    assert measures.inputs_per_second == pytest.approx(row["inputs"] / row["execute_seconds"])
    assert measures.fixed_cost == pytest.approx(row["fixed_seconds"] * 2.0 / 3600)
    assert measures.metadata()["execute_fixed_seconds"] >= 0.4
    assert measures.stage_seconds["execute"] >= row["fixed_seconds"] + row["execute_seconds"]
    home = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*home, "report", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"][0]["fixed_seconds"] == pytest.approx(row["fixed_seconds"], abs=1e-3)
    assert report["summary"]["median_fixed_seconds"] >= 0.4


def test_a_run_that_embeds_nothing_records_no_throughput(workspace, make_pipeline, fake_embedder):
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    pipeline.run("run-2", fake_embedder)  # nothing changed
    row, measures = measures_of(pipeline, "run-2")
    assert row["inputs"] == 0 and row["device"] is None
    assert measures.inputs_per_second is None and measures.cost_per_1k_inputs is None
    metadata = measures.metadata()
    for key in ("inputs_per_second", "tokens_per_second", "cost_per_1k_inputs", "device"):
        assert key not in metadata
    assert metadata["documents_attempted"] == 0 and "failure_rate" not in {
        k for k, v in metadata.items() if v is not None
    }


def test_a_broken_document_raises_the_failure_rate(workspace, make_pipeline, fake_embedder):
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    _, clean = measures_of(pipeline, "run-1")
    assert clean.failure_rate == 0.0 and clean.attempted == 3
    (workspace["docs"] / "broken.md").write_bytes(b"")  # empty: fails in collect
    (workspace["docs"] / "new.md").write_text("# New\n\nA fresh page about refunds.\n")
    pipeline.run("run-2", fake_embedder)
    row, broken = measures_of(pipeline, "run-2")
    assert broken.failed == 1 and broken.attempted == 2 and broken.unit == "documents"
    # what the run counted, in documents and chunks; the older columns mirror it
    assert row["counts"]["documents_landed"] == row["docs_landed"] == 1
    assert row["counts"]["chunks_embedded"] == row["chunks_embedded"] >= 1
    assert broken.failure_rate == 0.5
    assert broken.completeness is not None and broken.completeness < 1.0


def test_the_window_depends_on_the_trigger_and_an_overrun_is_flagged(
    workspace, make_pipeline, fake_embedder
):
    write_config(workspace["config"], extra="schedule: {window_minutes: 0.00001}")
    with workspace["config"].open("a") as config:
        config.write("\nsensor: {window_seconds: 30}\nfreshness: {lag_budget_seconds: 600}\n")
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder, trigger=SCHEDULE)
    _, scheduled = measures_of(pipeline, "run-1")
    assert scheduled.window_seconds == pytest.approx(0.0006)
    assert scheduled.overran and scheduled.window_used_fraction > 1
    (workspace["docs"] / "new.md").write_text("# New\n\nA fresh page.\n")
    pipeline.run("run-2", fake_embedder, trigger=SENSOR)
    _, sensed = measures_of(pipeline, "run-2")
    assert sensed.window_seconds == 630 and not sensed.overran
    assert sensed.trigger == SENSOR


def test_prices_are_checked_when_the_config_loads(workspace):
    write_config(workspace["config"], extra="cost: {device_hour: {tpu: 1.0}}\n")
    with pytest.raises(ConfigError, match=r"cost.device_hour: unknown device kind 'tpu'"):
        load_config(workspace["config"])
    write_config(workspace["config"], extra="cost: {device_hour: {cuda: -1}}\n")
    with pytest.raises(ConfigError, match=r"cost.device_hour: price of 'cuda'"):
        load_config(workspace["config"])
    write_config(workspace["config"], extra="cost: {device_hour: {cuda: 9.5}}\n")
    prices = load_config(workspace["config"]).cost
    assert prices.device_price("cuda:1") == 9.5 and prices.device_price("cpu") == 0.10


def test_the_backfill_estimate_uses_the_measured_throughput(
    workspace, make_pipeline, fake_embedder
):
    write_config(workspace["config"], extra=PRICED)
    pipeline = make_pipeline()
    assert pipeline.backfill_estimate() is None  # nothing measured yet
    pipeline.run("run-1", fake_embedder)
    row, _ = measures_of(pipeline, "run-1")
    estimate = pipeline.backfill_estimate()
    assert estimate is not None and estimate.inputs == pipeline.store.stats(pipeline.index).rows
    throughput = row["inputs"] / row["execute_seconds"]
    assert estimate.seconds == pytest.approx(estimate.inputs / throughput)
    assert estimate.cost == pytest.approx(estimate.seconds * 2.0 / 3600)
    assert estimate.fits_window


REPORT_CONFIG = """\
collections:
  - name: plain
    source: {kind: filesystem, path: plain, glob: "**/*"}
  - name: sharded
    shards: 2
    source: {kind: filesystem, path: sharded, glob: "**/*"}
"""

REPORT_FIELDS = {
    "run_id",
    "partition",
    "started_at",
    "trigger",
    "inputs",
    "tokens",
    "seconds",
    "inputs_per_second",
    "cost_per_1k_inputs",
    "window_used_fraction",
    "unit",
    "failed",
    "attempted",
    "failure_rate",
    "retries",
    "completeness",
}


@pytest.mark.parametrize("collection", ["plain", "sharded"])
def test_report_lists_each_partitions_runs_in_order(tmp_path, fake_embedder, capsys, collection):
    for folder in ("plain", "sharded"):
        write_corpus(tmp_path / folder)
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(REPORT_CONFIG)
    config = load_config(config_path)
    storage = resolve_storage(str(tmp_path / "home"))
    partitions = config.collection(collection).partition_keys()
    for n, trigger in enumerate((MANUAL, SCHEDULE)):
        for partition in config.partition_keys():
            open_partition(config, storage, partition).run(
                f"{partition}-{n}", fake_embedder, trigger=trigger
            )
        (tmp_path / collection / f"added-{n}.md").write_text(f"# Added {n}\n\nMore text.\n")
    args = ["--config", str(config_path), "--home", str(tmp_path / "home"), "report"]
    assert cli.main([*args, "--collection", collection, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    runs = report["runs"]
    assert [r["run_id"] for r in runs] == [f"{p}-{n}" for p in partitions for n in (0, 1)]
    assert all(set(r) >= REPORT_FIELDS for r in runs)
    assert [r["trigger"] for r in runs] == [MANUAL, SCHEDULE] * len(partitions)
    first_runs = [r for r in runs if r["run_id"].endswith("-0")]
    assert all(r["inputs"] > 0 and r["inputs_per_second"] > 0 for r in first_runs)
    assert report["summary"]["runs"] == len(runs) and report["summary"]["overran"] == []
    assert cli.main([*args, "--collection", collection, "--runs", "1"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[:3] == ["PARTITION", "STARTED", "TRIGGER"]
    assert len(text) == 1 + len(partitions) + 1 and text[-1].startswith("summary: ")
    assert all(line.split()[0] in partitions for line in text[1:-1])


def test_prepare_and_execute_report_progress_up_to_all_their_work(make_pipeline, fake_embedder):
    pipeline = make_pipeline()
    updates = []
    first = pipeline.run("run-1", fake_embedder, progress=updates.append, progress_interval=0)
    _, measures = measures_of(pipeline, "run-1")
    assert [u.stage for u in updates] == sorted(u.stage for u in updates)[::-1]  # prepare first
    executed = [u for u in updates if u.stage == "execute"]
    assert executed[0].done == 0 and executed[0].total == measures.inputs
    assert executed[-1].finished and executed[-1].done == measures.inputs
    assert [u.done for u in executed] == sorted(u.done for u in executed)
    # its rate counts from after the model loaded and calibrated; "done in" from the start
    assert executed[-1].working is not None and executed[-1].busy <= executed[-1].elapsed
    prepared = [u for u in updates if u.stage == "prepare"]
    assert prepared[-1].finished and prepared[-1].done == prepared[-1].total == 3
    assert prepared[-1].unit == "documents"
    # the ETA's reckoning: the tokens the plan holds for the inputs to do
    assert executed[0].total_tokens == first["plan"].real_tokens > 0
    updates.clear()
    pipeline.run("run-2", fake_embedder, progress=updates.append, progress_interval=0)
    assert updates == []  # nothing to chunk or embed: nothing to report
    (pipeline.collection.source.path / "refunds.md").write_text("# Refunds\n\nNew text.\n")
    pipeline.run("run-3", fake_embedder, progress=updates.append, progress_interval=0)
    prepared = [u for u in updates if u.stage == "prepare"]
    # it counts what it prepares: the one changed document, not the three it listed
    assert prepared[0].total == 1 and prepared[-1].done == 1


def test_run_prints_plain_progress_lines_when_not_on_a_terminal(workspace, capsys, monkeypatch):
    from batch_pipeline.inference import fake
    from batch_pipeline.inference import runner as runner_module

    # the CLI loads models through LoadedModels, which builds runner_module.EmbeddingRunner
    monkeypatch.setattr(
        runner_module, "EmbeddingRunner", lambda model, **_: fake.FakeEmbedder(model)
    )
    args = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*args, "run", "--collection", "handbook", "--trigger", "schedule"]) == 0
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if "execute:" in line]
    assert progress[0].endswith("inputs to do") and "done in" in progress[-1]
    assert "of its 4h 00m window" in captured.out


def test_each_stages_seconds_are_recorded_with_the_run(make_pipeline, fake_embedder):
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    row, measures = measures_of(pipeline, "run-1")
    assert set(measures.stage_seconds) == {"collect", "prepare", "plan", "execute", "land"}
    assert all(seconds >= 0 for seconds in measures.stage_seconds.values())
    assert json.loads(row["stage_seconds"]) == measures.stage_seconds
    # the stages ran inside the run: together no longer than its wall-clock
    assert sum(measures.stage_seconds.values()) <= measures.wall_seconds + 0.01
    metadata = measures.metadata()
    assert metadata["stage_seconds_execute"] == measures.stage_seconds["execute"]


def test_a_run_records_how_execute_chose_its_path_and_report_shows_it(
    workspace, make_pipeline, model, capsys
):
    """The real model, `auto` on this CPU: whatever it chooses, the run's measures and the
    report say what it chose, why, and every candidate it measured."""
    from batch_pipeline.inference.calibration import CALIBRATION_FILE
    from batch_pipeline.inference.runner import EmbeddingRunner

    pipeline = make_pipeline()
    auto = EmbeddingRunner(
        model, device="cpu", calibration_cache=workspace["home"] / CALIBRATION_FILE
    )
    pipeline.run("run-1", lambda: auto)
    _row, measures = measures_of(pipeline, "run-1")
    decision = auto.dtype_decision
    assert (measures.backend, measures.dtype) == decision.candidate == (auto.backend, auto.dtype)
    chosen = measures.calibration
    assert chosen["path"] == f"{auto.backend}/{auto.dtype}" and not chosen["cached"]
    assert {"torch/float32", "openvino/float32"} <= set(chosen["candidates"])
    assert chosen["candidates"]["torch/float32"]["min_cosine"] == 1.0
    assert measures.fidelity_min_cosine >= 0.9999
    assert 0 < chosen["seconds"] <= measures.fixed_seconds + 0.001  # rounded to ms

    capsys.readouterr()  # what the run printed (its progress)
    home = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*home, "report"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("PARTITION ")
    assert f"{auto.backend}/{auto.dtype}" in text.splitlines()[1]  # the PATH column
    assert f"run-1: chose {chosen['path']} (" in text and "torch/float32 " in text
    assert cli.main([*home, "report", "--json"]) == 0
    (reported,) = json.loads(capsys.readouterr().out)["runs"]
    assert reported["backend"] == auto.backend and reported["calibration"] == chosen
