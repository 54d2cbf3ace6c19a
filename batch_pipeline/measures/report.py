"""`batch-pipeline report`: the newest runs per partition with their measures, and a trend.

Rows are built from what the tracking store recorded (`RunMeasures`), so the report works the
same for Dagster runs and for cron users of `batch-pipeline run`.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from batch_pipeline.measures.run import PROVIDER, RunMeasures, median, rolling_measures


@dataclass(frozen=True)
class ReportedRun:
    run_id: str
    generation: str
    measures: RunMeasures

    def as_dict(self) -> dict[str, object]:
        """One run's line of the report, JSON-ready (times in ISO 8601)."""
        m = self.measures
        return {
            "run_id": self.run_id,
            "partition": m.partition,
            "generation": self.generation,
            "started_at": datetime.fromtimestamp(m.started_at, UTC).isoformat(),
            "trigger": m.trigger,
            "inputs": m.inputs,
            "tokens": m.tokens,
            "seconds": round(m.wall_seconds, 3),
            "execute_seconds": round(m.execute_seconds, 3),
            "fixed_seconds": round(m.fixed_seconds, 3),
            "inputs_per_second": _round(m.inputs_per_second, 2),
            "tokens_per_second": _round(m.tokens_per_second, 1),
            "device": m.device,
            "devices": m.devices,
            "dtype": m.dtype,
            "backend": m.backend,
            "executor": m.executor,
            "submitted_by": m.submitted_by,
            "cost_per_1k_inputs": _round(m.cost_per_1k_inputs, 6),
            "cost_per_1m_tokens": _round(m.cost_per_1m_tokens, 6),
            "execute_cost": round(m.execute_cost, 6),
            "run_cost": round(m.run_cost, 6),
            "currency": m.currency,
            "window_seconds": m.window_seconds,
            "window_used_fraction": _round(m.window_used_fraction, 4),
            "overran": m.overran,
            "unit": m.unit,
            "attempted": m.attempted,
            "failed": m.failed,
            "failure_rate": _round(m.failure_rate, 4),
            "retries": m.retries,
            "inputs_resumed": m.inputs_resumed,
            "oom_splits": m.oom_splits,
            "quarantined": m.quarantined,
            "completeness": m.completeness,
            "stage_seconds": m.stage_seconds,
            "calibration": m.calibration,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def calibration_line(calibration: dict) -> str | None:
    """`chose openvino/float32 (openvino/float32 ran 1.48x ...); measured in 1.45 s: torch/float32
    412.1 inputs/s, openvino/float32 610.3 inputs/s at min cosine 1.000000`; None where the
    run measured nothing (no calibration, or the cache answered)."""
    if not calibration or calibration.get("cached") or not calibration.get("candidates"):
        return None
    candidates = ", ".join(
        f"{name} {c['inputs_per_second']:,} inputs/s at min cosine {c['min_cosine']:.6f}"
        for name, c in calibration["candidates"].items()
    )
    line = (
        f"chose {calibration['path']} ({calibration['reason']}); measured in "
        f"{calibration['seconds']:g} s: {candidates}"
    )
    if calibration.get("export_seconds"):  # the OpenVINO export, and its int8 model if measured
        int8 = "openvino/int8" in calibration["candidates"]
        made = "exported and quantized" if int8 else "exported"
        line += f"; {made} the model in {calibration['export_seconds']:g} s"
    return line


def reported_runs(rows: Iterable[dict]) -> list[ReportedRun]:
    """Report lines from tracking's run records, oldest first; runs recorded before measures
    existed are left out."""
    found = [
        ReportedRun(str(row["run_id"]), str(row["generation"]), measures)
        for row in rows
        if (measures := RunMeasures.from_record(row)) is not None
    ]
    return sorted(found, key=lambda run: run.measures.started_at)


def trend(runs: list[ReportedRun]) -> dict[str, object]:
    """Throughput and cost per 1k inputs over the runs that embedded something, as totals
    (so a one-page run weighs one page, as in the UI's rolling figures), the median fixed
    cost of a run, and every run that overran its window."""
    measured = [r.measures for r in runs]
    rolling = rolling_measures(measured)
    return {
        "runs": len(runs),
        "runs_measured": rolling.get("rolling_runs", 0),
        "inputs_per_second": rolling.get("rolling_inputs_per_second"),
        "tokens_per_second": rolling.get("rolling_tokens_per_second"),
        "cost_per_1k_inputs": rolling.get("rolling_cost_per_1k_inputs"),
        "median_fixed_seconds": _round(median(m.fixed_seconds for m in measured if m.inputs), 3),
        "currency": measured[-1].currency if measured else None,
        "overran": [r.run_id for r in runs if r.measures.overran],
    }


def trend_line(summary: dict[str, object]) -> str:
    """`5 runs; 45.2 inputs/s and 0.000210 USD per 1k inputs over the 3 that embedded
    (totals), plus a median 2.1 s fixed cost per run; none overran its window`."""
    count = summary["runs"]
    parts = [f"{count} run" + ("" if count == 1 else "s")]
    if summary["inputs_per_second"] is not None:
        parts.append(
            f"{summary['inputs_per_second']:,} inputs/s and "
            f"{summary['cost_per_1k_inputs']:.6f} {summary['currency']} per 1k inputs over "
            f"the {summary['runs_measured']} that embedded (totals), plus a median "
            f"{summary['median_fixed_seconds']:g} s fixed cost per run"
        )
    else:
        parts.append("none embedded anything")
    overran = summary["overran"]
    parts.append(
        f"{len(overran)} overran its window: {', '.join(overran)}"  # type: ignore[arg-type]
        if overran
        else "none overran its window"
    )
    return "; ".join(parts)


def run_path(run: dict) -> str | None:
    """What ran a run's model, as `report` shows it: the backend (or a chat model's executor)
    and the dtype, and the GPUs where more than one (`vllm-run-batch/bfloat16 x8`); a
    provider's batch API by its executor alone."""
    executor = run.get("executor")
    if run.get("device") == PROVIDER:
        return executor
    if not run.get("dtype"):
        return None
    path = f"{executor or run.get('backend') or 'torch'}/{run['dtype']}"
    devices = run.get("devices") or 1
    return f"{path} x{devices}" if devices > 1 else path
