"""One run's measures, from its own recorded figures.

`RunMeasures` holds what a run recorded (counts, seconds, device, the prices and the window
in force) and derives the rest: throughput, estimated cost, share of the window used, failure
rate and the backfill estimate. Costs are estimates from configured prices (`cost:` in the
configuration), not bills. A run that embedded nothing has no throughput and no cost per
input: `None`, so plots are not dragged to zero.
"""

import json
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields

from batch_pipeline.config import PipelineConfig

# What started a run (the `trigger` of its record).
SENSOR = "sensor"
SCHEDULE = "schedule"
BACKFILL = "backfill"
MANUAL = "manual"
TRIGGERS = (SENSOR, SCHEDULE, BACKFILL, MANUAL)

# The device a provider's Batch API runs on, as a run's measures name it: its runs are
# priced by the tokens they send, not by the hour.
PROVIDER = "provider"

# What a run's inputs are (the `unit` of its record): each product counts its own.
DOCUMENTS = "documents"
TICKETS = "tickets"


def run_window_seconds(config: PipelineConfig, trigger: str) -> float:
    """The wall-clock a run may take: a sensor run's micro-batch window plus the freshness
    lag budget; any other run's `schedule.window_minutes`."""
    if trigger == SENSOR:
        return float(config.sensor.window_seconds + config.freshness.lag_budget_seconds)
    return config.schedule.window_minutes * 60.0


def _ratio(numerator: float, denominator: float, scale: float = 1.0) -> float | None:
    return numerator / denominator * scale if denominator else None


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class RunMeasures:
    """What one run of one partition did, cost and took (stored with its run record)."""

    partition: str
    trigger: str
    started_at: float  # epoch seconds: when the run (its first stage) started
    finished_at: float  # when land finished
    inputs: int = 0  # inputs embedded by this run (not resumed, not reused)
    tokens: int = 0
    execute_seconds: float = 0.0  # time spent embedding: the marginal time
    fixed_seconds: float = 0.0  # paid once per run: model load, dtype calibration, warm-up
    device: str | None = None  # None: nothing was embedded, no model was loaded
    dtype: str | None = None
    backend: str | None = None  # what ran the model: torch or openvino
    fidelity_min_cosine: float | None = None  # vs torch fp32; 1.0 when run in torch fp32
    devices: int = 1  # devices execute held (GPUs: tensor x data parallel)
    device_price_hour: float = 0.0  # of them all: the device kind's price times `devices`
    host_price_hour: float = 0.0
    currency: str = "USD"
    window_seconds: float | None = None
    unit: str = DOCUMENTS  # what the run's inputs are: documents, tickets (later prompts)
    attempted: int = 0  # inputs of that unit the run tried to land or remove
    failed: int = 0  # of those, failed (in any stage)
    retries: int = 0  # step retries (Dagster's retry number) within the run
    inputs_resumed: int = 0  # model inputs taken from the checkpoints of an interrupted attempt
    oom_splits: int = 0
    quarantined: int = 0  # inputs of the partition waiting for new content
    completeness: float | None = None
    partition_inputs: int = 0  # chunks of the partition: what a full rebuild embeds
    stage_seconds: dict[str, float] = field(default_factory=dict)  # each stage's wall-clock
    # how execute chose its path (`DtypeDecision.summary`): {} when nothing ran
    calibration: dict[str, object] = field(default_factory=dict)
    executor: str | None = None  # what ran the plan, for a chat model (`generation_executors`)
    # what a provider charges for the run's tokens at its batch prices (None: priced by time)
    token_cost: float | None = None
    # the run that submitted the provider batches this run collected: one run in two (its
    # record is this one's, which starts when that run started)
    submitted_by: str | None = None

    @classmethod
    def from_execute(
        cls, executed: dict, config: PipelineConfig, trigger: str, **values: object
    ) -> "RunMeasures":
        """A run's measures from what its execute recorded (`ExecuteSummary.record`), the
        prices and window in force, and `values` (the partition, times and counts)."""
        device = executed.get("device")
        devices = int(executed.get("devices") or 1)  # GPUs its engines held
        cost = config.cost
        token_cost = executed.get("token_cost")
        window = executed.get("window_seconds") or run_window_seconds(config, trigger)
        return cls(
            trigger=trigger,
            inputs=int(executed.get("inputs", 0)),
            tokens=int(executed.get("tokens", 0)),
            execute_seconds=float(executed.get("seconds", 0.0)),
            fixed_seconds=float(executed.get("fixed_seconds", 0.0)),
            device=device,
            dtype=executed.get("dtype"),
            backend=executed.get("backend"),
            calibration=dict(executed.get("calibration") or {}),
            fidelity_min_cosine=executed.get("fidelity_min_cosine"),
            devices=devices,
            device_price_hour=(
                cost.device_price(device) * devices if device and token_cost is None else 0.0
            ),
            host_price_hour=cost.host_hour,
            currency=cost.currency,
            window_seconds=float(window),
            inputs_resumed=int(executed.get("inputs_resumed", 0)),
            oom_splits=int(executed.get("oom_splits", 0)),
            executor=executed.get("executor"),
            token_cost=None if token_cost is None else float(token_cost),
            submitted_by=executed.get("submitted_by"),
            **values,
        )

    # ------------------------------------------------------------------ derived

    @property
    def wall_seconds(self) -> float:
        return max(0.0, self.finished_at - self.started_at)

    @property
    def inputs_per_second(self) -> float | None:
        return _ratio(self.inputs, self.execute_seconds) if self.inputs else None

    @property
    def tokens_per_second(self) -> float | None:
        return _ratio(self.tokens, self.execute_seconds) if self.inputs else None

    @property
    def execute_cost(self) -> float:
        """Execute's marginal seconds at the device's hourly price, or a provider's charge
        for the run's tokens."""
        if self.token_cost is not None:
            return self.token_cost
        return self.execute_seconds * self.device_price_hour / 3600

    @property
    def fixed_cost(self) -> float:
        """The run's fixed seconds (model load, calibration, warm-up) at the device's price."""
        return self.fixed_seconds * self.device_price_hour / 3600

    @property
    def run_cost(self) -> float:
        """The whole run's wall-clock at the host's hourly price."""
        return self.wall_seconds * self.host_price_hour / 3600

    @property
    def cost_per_1k_inputs(self) -> float | None:
        return _ratio(self.execute_cost, self.inputs, 1000) if self.inputs else None

    @property
    def cost_per_1m_tokens(self) -> float | None:
        return _ratio(self.execute_cost, self.tokens, 1_000_000) if self.tokens else None

    @property
    def window_used_fraction(self) -> float | None:
        return _ratio(self.wall_seconds, self.window_seconds or 0)

    @property
    def overran(self) -> bool:
        return self.window_seconds is not None and self.wall_seconds > self.window_seconds

    @property
    def failure_rate(self) -> float | None:
        return _ratio(self.failed, self.attempted)

    # ---------------------------------------------------------------- storage

    def record(self) -> dict[str, object]:
        """The run record's columns (see `state.tracking.schema.runs`)."""
        return {
            **asdict(self),
            "stage_seconds": json.dumps(self.stage_seconds),
            "calibration": json.dumps(self.calibration),
        }

    @classmethod
    def from_record(cls, row: dict[str, object]) -> "RunMeasures | None":
        """The measures of a stored run; None for runs recorded before measures were."""
        if row.get("partition") is None or row.get("started_at") is None:
            return None
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in row.items() if k in names and v is not None}
        values["stage_seconds"] = json.loads(str(values.get("stage_seconds") or "{}"))
        values["calibration"] = json.loads(str(values.get("calibration") or "{}"))
        return cls(**values)

    def metadata(self) -> dict[str, object]:
        """Numeric metadata the Dagster UI plots; throughput and cost per input only when
        something was embedded, the failure rate only when something was attempted."""
        values: dict[str, object] = {
            "trigger": self.trigger,
            "run_wall_seconds": round(self.wall_seconds, 3),
            "run_cost": round(self.run_cost, 6),
            "execute_cost": round(self.execute_cost, 6),
            "execute_fixed_seconds": round(self.fixed_seconds, 3),
            "execute_fixed_cost": round(self.fixed_cost, 6),
            "currency": self.currency,
            "window_seconds": self.window_seconds,
            "window_used_fraction": _rounded(self.window_used_fraction, 6),
            **({"executor": self.executor} if self.executor else {}),
            **({"submitted_by": self.submitted_by} if self.submitted_by else {}),
            f"{self.unit}_attempted": self.attempted,
            "failure_rate": _rounded(self.failure_rate, 4),
            "step_retries": self.retries,
            "inputs_resumed_from_checkpoint": self.inputs_resumed,
            "oom_splits": self.oom_splits,
            f"{self.unit}_quarantined": self.quarantined,
            **{f"stage_seconds_{stage}": s for stage, s in self.stage_seconds.items()},
        }
        if self.inputs:
            values.update(
                inputs_per_second=_rounded(self.inputs_per_second, 2),
                tokens_per_second=_rounded(self.tokens_per_second, 1),
                cost_per_1k_inputs=round(self.cost_per_1k_inputs or 0.0, 6),
                cost_per_1m_tokens=_rounded(self.cost_per_1m_tokens, 6),
                device=self.device,
                devices=self.devices,
                dtype=self.dtype,
                backend=self.backend,
                fidelity_min_cosine=self.fidelity_min_cosine,
            )
        return values


@dataclass(frozen=True)
class ExecuteTotals:
    """Totals over the runs that computed something (a no-op adds nothing), so a figure taken
    from them weighs each run by its size: one tiny run does not skew it."""

    runs: int = 0
    inputs: int = 0
    tokens: int = 0
    seconds: float = 0.0
    cost: float = 0.0

    @classmethod
    def of(cls, runs: Iterable[RunMeasures]) -> "ExecuteTotals":
        measured = [r for r in runs if r.inputs and r.execute_seconds]
        return cls(
            runs=len(measured),
            inputs=sum(r.inputs for r in measured),
            tokens=sum(r.tokens for r in measured),
            seconds=sum(r.execute_seconds for r in measured),
            cost=sum(r.execute_cost for r in measured),
        )

    @property
    def inputs_per_second(self) -> float | None:
        """Total inputs over total execute seconds; None when no run computed anything."""
        return _ratio(self.inputs, self.seconds) if self.runs else None


def measured_throughput(runs: Iterable[RunMeasures]) -> float | None:
    """Inputs per second of execute over `runs` that embedded something (`ExecuteTotals`);
    None when none did."""
    return ExecuteTotals.of(runs).inputs_per_second


ROLLING_RUNS = 20  # the generation's newest runs its rolling figures are taken over


def rolling_measures(runs: Iterable[RunMeasures]) -> dict[str, object]:
    """The generation's recent throughput and cost, as totals over its runs that computed
    something (`ExecuteTotals`), so one small run barely moves them; recorded with every
    run, a no-op's too, so the UI always has them. {} before any run computed anything."""
    totals = ExecuteTotals.of(runs)
    if not totals.runs:
        return {}
    return {
        "rolling_inputs_per_second": round(totals.inputs / totals.seconds, 2),
        "rolling_tokens_per_second": round(totals.tokens / totals.seconds, 1),
        "rolling_cost_per_1k_inputs": round(totals.cost / totals.inputs * 1000, 6),
        "rolling_runs": totals.runs,
    }


@dataclass(frozen=True)
class BackfillEstimate:
    """How long, and at what cost, re-embedding every chunk of a partition would take at the
    measured throughput (what a model change's backfill needs): execute time only."""

    inputs: int
    inputs_per_second: float
    device_price_hour: float
    window_seconds: float

    @property
    def seconds(self) -> float:
        return self.inputs / self.inputs_per_second

    @property
    def cost(self) -> float:
        return self.seconds * self.device_price_hour / 3600

    @property
    def fits_window(self) -> bool:
        return self.seconds <= self.window_seconds

    def metadata(self) -> dict[str, object]:
        return {
            "backfill_inputs": self.inputs,
            "backfill_estimate_seconds": round(self.seconds, 3),
            "backfill_estimate_cost": round(self.cost, 6),
            "backfill_fits_window": self.fits_window,
        }


def backfill_estimate(
    runs: list[RunMeasures], inputs: int, config: PipelineConfig
) -> BackfillEstimate | None:
    """The estimate from the newest runs' throughput and device; None before any run
    embedded something. A backfill is judged against the nightly window."""
    throughput = measured_throughput(runs)
    if throughput is None:
        return None
    device, devices = next(((r.device, r.devices) for r in runs if r.device), ("cpu", 1))
    return BackfillEstimate(
        inputs=inputs,
        inputs_per_second=throughput,
        device_price_hour=config.cost.device_price(device) * devices,
        window_seconds=run_window_seconds(config, SCHEDULE),
    )


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
