"""The run's measures as the Dagster UI shows them: the charted measures as numbers on
`vector_index`, everything else as text, Dagster's step retries counted, and a warning when a
run overruns its window."""

import dagster as dg
import pytest

from batch_pipeline.definitions import build_definitions
from resources.testing import FakeInferenceResource
from tests.support import (
    STAGE_ASSETS,
    materialize,
    metadata_of,
    stage_resources,
    write_config,
)

CHARTED = (
    "rolling_inputs_per_second",
    "rolling_tokens_per_second",
    "rolling_cost_per_1k_inputs",
    "window_used_fraction",
    "run_wall_seconds",
)
# a run's own rates: text, since a one-page run's rate is its batch of one, not a regression
RUN_RATES = ("inputs_per_second", "tokens_per_second", "cost_per_1k_inputs")


def test_land_records_the_runs_measures_as_numbers(workspace):
    write_config(workspace["config"], extra="cost: {device_hour: {cpu: 1.5}, currency: EUR}")
    with dg.instance_for_test() as instance:
        result = materialize(workspace, instance, fake_model=True)
        land = metadata_of(result, "vector_index")
        for key in CHARTED:
            assert isinstance(land[key], float) and land[key] > 0, key
        assert not set(RUN_RATES) & charted(result, "vector_index")
        for key in RUN_RATES:
            assert land[key] > 0, key
        # what the run paid once (the model load) is charted apart from its marginal rate
        assert "execute_fixed_seconds" in charted(result, "vector_index")
        execute = metadata_of(result, "chunk_embeddings")
        assert execute["fixed_seconds"] >= execute["model_load_seconds"] >= 0
        assert land["currency"] == "EUR" and land["trigger"] == "manual"
        assert land["failure_rate"] == 0.0
        # counts zero by design are left out, not plotted as a flat line of zeros; the retry
        # count is the retry rate's measure, so a healthy run records (and plots) its 0
        assert not {"oom_splits", "inputs_resumed_from_checkpoint"} & set(land)
        assert land["step_retries"] == 0 and "step_retries" in charted(result, "vector_index")
        # what the estimate is for is text, not a plot
        assert "backfill_inputs" not in charted(result, "vector_index")
        assert land["backfill_inputs"] == land["dagster/row_count"]
        rebuild = land["dagster/row_count"] / land["inputs_per_second"]  # this run's
        assert land["backfill_estimate_seconds"] == pytest.approx(rebuild, abs=2e-3)
        assert land["backfill_fits_window"] is True
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert checks["run_within_window"].passed
        logged = [e.user_message for e in instance.all_logs(result.run_id)]
        execute = [m for m in logged if m.startswith("execute: ")]
        assert execute[0] == f"execute: {land['chunks_embedded']} inputs to do"
        assert "done in" in execute[-1]
        assert any(m.startswith("prepare: ") and "done in" in m for m in logged)

        first = land
        noop = materialize(workspace, instance, fake_model=True)
        land = metadata_of(noop, "vector_index")
        assert "inputs_per_second" not in land and "cost_per_1k_inputs" not in land
        assert land["window_used_fraction"] > 0  # a no-op run still took time
        # the generation's rolling figures are on every materialisation, a no-op's too, so a
        # partition's latest event always plots them: here the one run that embedded
        assert land["rolling_runs"] == first["rolling_runs"] == 1
        for key in ("rolling_inputs_per_second", "rolling_cost_per_1k_inputs"):
            assert land[key] == first[key] > 0
        assert land["rolling_inputs_per_second"] == first["inputs_per_second"]


def charted(result: dg.ExecuteInProcessResult, asset: str) -> set[str]:
    """The keys the asset's Plots view draws: its int and float metadata."""
    (event,) = result.asset_materializations_for_node(asset)
    numeric = (dg.IntMetadataValue, dg.FloatMetadataValue)
    return {k for k, v in event.metadata.items() if isinstance(v, numeric)}


def test_every_asset_charts_about_ten_measures_and_a_no_op_still_charts_the_headline(workspace):
    with dg.instance_for_test() as instance:
        first = materialize(workspace, instance, fake_model=True)
        for asset in STAGE_ASSETS:
            keys = charted(first, asset)
            assert 3 <= len(keys) <= 13, (asset, sorted(keys))
            # constants and settings are text: a flat line is not a measure
            assert not keys & {"window_seconds", "max_tokens", "token_budget", "backfill_inputs"}
        assert "tokens_per_second" not in charted(first, "vector_index")  # the run's own: text
        noop = materialize(workspace, instance, fake_model=True)
        headline = {
            "rolling_inputs_per_second",
            "rolling_tokens_per_second",
            "rolling_cost_per_1k_inputs",
            "run_wall_seconds",
            "window_used_fraction",
            "completeness",
            "lag_seconds",
            "backfill_estimate_seconds",
        }
        assert headline <= charted(noop, "vector_index")


def test_a_run_that_overruns_its_window_warns(workspace):
    write_config(workspace["config"], extra="schedule: {window_minutes: 0.00001}")
    with dg.instance_for_test() as instance:
        result = materialize(workspace, instance, fake_model=True)
        assert result.success  # a warning, not a failure
        check = {c.check_name: c for c in result.get_asset_check_evaluations()}["run_within_window"]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
        assert check.metadata["window_used_fraction"].value > 1


class FlakyInferenceResource(FakeInferenceResource):
    """FAULT INJECTION: the first model load fails as a lost connection would."""

    def runner(self, model):  # noqa: ANN001, ANN201
        if not FAILED_LOADS:
            FAILED_LOADS.append(model.name)
            raise ConnectionError("injected: the model server went away")
        return super().runner(model)


FAILED_LOADS: list[str] = []


def test_a_step_dagster_retried_counts_as_one_retry(workspace):
    FAILED_LOADS.clear()
    defs = build_definitions(workspace["config"])
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [defs.get_assets_def(name) for name in STAGE_ASSETS],
            partition_key="handbook",
            instance=instance,
            resources={**stage_resources(workspace), "inference": FlakyInferenceResource()},
        )
        assert result.success and FAILED_LOADS == ["all-MiniLM-L6-v2"]
        assert metadata_of(result, "vector_index")["step_retries"] == 1
