"""A generation's rolling figures: totals over its recent runs that computed something, so a
no-op adds nothing and one small run weighs by its size, not as one run of twenty."""

from batch_pipeline.measures.run import RunMeasures, measured_throughput, rolling_measures


def run(inputs: int, seconds: float, tokens: int = 0) -> RunMeasures:
    return RunMeasures(
        "kb", "manual", 0.0, 1.0, inputs, tokens, seconds, "cpu", device_price_hour=3.6
    )


def test_rolling_figures_are_totals_over_the_runs_that_computed_something():
    full, small, noop = run(1000, 10.0, 20_000), run(10, 0.5, 150), run(0, 0.0)
    rolling = rolling_measures([full, small, noop])
    assert rolling["rolling_runs"] == 2  # the no-op is left out
    assert rolling["rolling_inputs_per_second"] == round(1010 / 10.5, 2)  # 96.19, not (100+20)/2
    assert rolling["rolling_tokens_per_second"] == round(20_150 / 10.5, 1)
    # 3.6 per hour is 0.001 per second: 10.5 s for 1,010 inputs
    assert rolling["rolling_cost_per_1k_inputs"] == round(10.5 * 0.001 / 1010 * 1000, 6)


def test_no_rolling_figures_before_anything_was_computed():
    assert rolling_measures([run(0, 0.0)]) == {}
    assert rolling_measures([]) == {}


def test_the_backfill_throughput_is_the_same_total_as_the_rolling_figure():
    runs = [run(1000, 10.0, 20_000), run(10, 0.5, 150), run(0, 0.0)]
    assert measured_throughput(runs) == 1010 / 10.5
    rolling = rolling_measures(runs)["rolling_inputs_per_second"]
    assert round(measured_throughput(runs), 2) == rolling
    assert measured_throughput([run(0, 0.0)]) is None
    assert measured_throughput([]) is None


def test_the_report_says_what_its_one_off_model_seconds_made():
    from batch_pipeline.measures.report import calibration_line

    measured = {"inputs_per_second": 500.0, "min_cosine": 0.996}
    calibration = {
        "path": "openvino/int8",
        "reason": "fastest",
        "seconds": 1.5,
        "export_seconds": 12.1,
        "candidates": {"openvino/int8": measured},
    }
    assert calibration_line(calibration).endswith("; exported and quantized the model in 12.1 s")
    calibration["candidates"] = {"openvino/bfloat16": measured}
    assert calibration_line(calibration).endswith("; exported the model in 12.1 s")
    assert calibration_line({**calibration, "cached": True}) is None
