"""Stage 4, execute: run the batch plan and stream the vectors to staging.

The output holds one row per planned input (`input_hash`, `vector`, `embedded_at`, and
`resumed`: taken from a checkpoint rather than computed by this run); inputs that failed on
their own are listed in the summary with their reason instead. The plan's token ids go to the
model with their texts, so the model pads them instead of tokenising again.

The output and its checkpoints are the shared skeleton's (`stages.checkpointed`): a retry
takes what earlier runs checkpointed, and checkpoints every `checkpoint_every` batches.
Checkpoints live under `<checkpoint_dir>/<writer>/part-*.parquet`, one folder per execute, so
runs of one partition at once never write into, or delete, each other's folder; land removes
exactly the folders an output used once their vectors are in the table.
"""

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from batch_pipeline.inference.calibration import REFERENCE, SAMPLE_INPUTS, DtypeDecision
from batch_pipeline.inference.embedder import Embedder, PlannedBatch, RunStats
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages.checkpointed import (
    DEFAULT_CHECKPOINT_EVERY,
    CheckpointedOutput,
    CheckpointedRun,
    execute_checkpointed,
)
from batch_pipeline.stages.outcome import ExecuteOutcome
from batch_pipeline.state.staging import StagePath, read_batches, read_groups, stage_summary


def embeddings_schema(dim: int) -> pa.Schema:
    """Vectors by input hash: the checkpoint files' schema."""
    return pa.schema(
        [
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("embedded_at", pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )


def output_schema(dim: int) -> pa.Schema:
    """Execute's output: the vectors, each marked `resumed` if it was taken from a checkpoint
    of an interrupted run rather than computed by this one."""
    return embeddings_schema(dim).append(pa.field("resumed", pa.bool_(), nullable=False))


@dataclass
class ExecuteSummary(ExecuteOutcome):
    """What an embedding execute did: the runner's counts, on what it ran, and what every
    execute keeps (`ExecuteOutcome`)."""

    stats: RunStats
    device: str
    dtype: str
    dimension: int
    dtype_decision: DtypeDecision | None = None  # how the runner chose its dtype and backend
    load_seconds: float = 0.0  # loading the model for this run (0 when it was loaded already)
    backend: str = "torch"  # what ran the model: torch or openvino

    @property
    def token_cost(self) -> float | None:
        """What the provider charges for the tokens this run embedded, at its batch price."""
        if self.token_prices is None:
            return None
        return self.stats.tokens * self.token_prices[0] / 1_000_000

    @property
    def fixed_seconds(self) -> float:
        """What the run paid once, whatever its size: the model load, the dtype calibration
        and the first call's warm-up. `stats.seconds` is the marginal time."""
        s = self.stats
        return self.load_seconds + s.calibration_seconds + s.warmup_seconds

    @property
    def fidelity_min_cosine(self) -> float | None:
        """The lowest cosine to fp32 vectors this dtype is known to keep: 1.0 in fp32 (the
        reference itself), as calibration measured it, or None when not measured."""
        decision = self.dtype_decision
        if decision is not None and decision.candidate == (self.backend, self.dtype):
            return decision.min_cosine
        return 1.0 if (self.backend, self.dtype) == REFERENCE else None

    def record(self) -> dict[str, object]:
        """What land needs to measure the run, written into the output file's footer."""
        s = self.stats
        ran = bool(s.inputs)
        return {
            "inputs": s.inputs,
            "tokens": s.tokens,
            "seconds": s.seconds,
            "fixed_seconds": self.fixed_seconds,
            "oom_splits": s.oom_splits,
            "inputs_failed": len(self.failed_inputs),
            "inputs_resumed": self.resumed_inputs,
            "device": self.device if ran else None,
            "dtype": self.dtype if ran else None,
            "backend": self.backend if ran else None,
            "calibration": self.dtype_decision.summary() if ran and self.dtype_decision else {},
            "fidelity_min_cosine": self.fidelity_min_cosine if ran else None,
            "failed": self.failed_inputs,  # input_hash -> reason: land records the reason
            "inputs_unanswered": self.unanswered,
            "executor": self.executor,
            "token_cost": self.token_cost,
            "window_seconds": self.window_seconds,
            **self.batches.record(),
        }

    def metadata(self) -> dict[str, object]:
        """Counts always; throughput, padding, device and dtype only when something ran, so a
        no-op run does not plot a zero throughput or a perfect padding efficiency."""
        s = self.stats
        values: dict[str, object] = {
            "inputs_embedded": s.inputs,
            "inputs_resumed_from_checkpoint": self.resumed_inputs,
            "inputs_failed": len(self.failed_inputs),
            "tokens": s.tokens,
            "batches_run": s.batches,
            "oom_splits": s.oom_splits,
            "inputs_tokenized": s.tokenized,
            "embedding_dimension": self.dimension,
            **self.batches.metadata(),
        }
        if self.unanswered:
            values["inputs_unanswered"] = self.unanswered
        if self.executor is not None:
            values["executor"] = self.executor
        if self.token_cost is not None:
            values["token_cost"] = round(self.token_cost, 6)
        if s.inputs:
            if self.dtype_decision is not None:
                values.update(self.dtype_decision.metadata())
            values.update(
                padded_tokens=s.padded_tokens,
                padding_efficiency=round(s.tokens / s.padded_tokens, 4),
                seconds=round(s.seconds, 3),
                tokens_per_second=round(s.tokens_per_second, 1),
                model_load_seconds=round(self.load_seconds, 3),
                warmup_seconds=round(s.warmup_seconds, 3),
                fixed_seconds=round(self.fixed_seconds, 3),
                device=self.device,
                dtype=self.dtype,
                backend=self.backend,
            )
        return values


def _planned_batches(
    plan_path: StagePath | Path,
) -> Iterator[list[tuple[str, str, list[int]]]]:
    """Each planned batch's (input hash, input text, token ids), streamed in plan order."""
    return read_groups(plan_path, "batch_index", ["input_hash", "input_text", "input_ids"])


def _middle_inputs(
    plan_path: StagePath | Path, done_keys: set[str], todo: int, size: int = 4 * SAMPLE_INPUTS
) -> list[str]:
    """About `size` inputs from the middle of the plan's inputs still to embed: the plan is
    sorted by length, so these are of median length. Streamed: memory holds the sample."""
    start = max(0, (todo - size) // 2)
    found: list[str] = []
    position = 0
    for record_batch in read_batches(plan_path, ["input_hash", "input_text"]):
        columns = record_batch.to_pydict()
        for key, text in zip(columns["input_hash"], columns["input_text"], strict=True):
            if key in done_keys:
                continue
            if position >= start:
                found.append(text)
                if len(found) >= size:
                    return found
            position += 1
    return found


def execute_record(embeddings_path: StagePath | Path) -> dict[str, object]:
    """What the execute that wrote this file recorded (`ExecuteSummary.record`); {} for files
    written before it did."""
    return stage_summary(embeddings_path)


@dataclass(frozen=True)
class ExecuteAnswers:
    """What an execute left without a vector, as land reads it from the output's footer:
    the inputs that failed, with their reasons, and how many inputs a provider has not
    answered yet (in flight, or unanswered twice). Every product's land asks it about an
    input it finds no vector for."""

    failed: dict[str, str]
    unanswered: int = 0

    @classmethod
    def of(cls, embeddings_path: StagePath | Path) -> "ExecuteAnswers":
        record = execute_record(embeddings_path)
        return cls(dict(record.get("failed") or {}), int(record.get("inputs_unanswered") or 0))

    def awaited(self, input_hash: str) -> bool:
        """Whether an input with no vector is still to be answered: what holds it waits for
        the run that collects its answer, neither landed nor failed."""
        return self.unanswered > 0 and input_hash not in self.failed

    def reason(self, input_hash: str, otherwise: str) -> str:
        """Why an input with no vector failed, as execute recorded it, or `otherwise`."""
        return self.failed.get(input_hash) or otherwise


def execute_plan(
    plan_path: StagePath | Path,
    out_path: StagePath | Path,
    get_runner: Callable[[], Embedder],
    dimension: int,
    checkpoint_dir: StagePath | Path | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    progress: ProgressSink | None = None,
    progress_interval: float = 15.0,
) -> ExecuteSummary:
    """Embed the plan, checkpointing every `checkpoint_every` batches to `checkpoint_dir`,
    and telling `progress` how far it got every `progress_interval` seconds.

    Inputs found in checkpoints (from a run that was killed) are not embedded again, so a
    retry recomputes at most one checkpoint interval. An empty plan writes an empty file
    without loading the model. The plan is streamed: memory holds the batches in flight, not
    the plan.
    """
    family = EmbedRun(get_runner, dimension, checkpoint_every)
    return execute_checkpointed(
        family, plan_path, out_path, checkpoint_dir, progress, progress_interval
    )


class EmbedRun(CheckpointedRun):
    """The embed family's step in the checkpointed loop: the plan's batches through an
    `Embedder`, its vectors as rows; the ETA is reckoned in tokens."""

    def __init__(self, get_runner: Callable[[], Embedder], dimension: int, every: int) -> None:
        self.get_runner, self.dimension, self.every = get_runner, dimension, every
        self.rows = embeddings_schema(dimension)

    def start(self, plan_path: StagePath | Path) -> ExecuteSummary:
        # nothing embedded yet: no model was loaded
        return ExecuteSummary(
            stats=RunStats(), device="none", dtype="none", dimension=self.dimension
        )

    def planned(self, plan_path: StagePath | Path) -> Iterator[tuple[str, int]]:
        columns = ["input_hash", "token_count"]
        for record_batch in read_batches(plan_path, columns, batch_rows=65536):
            yield from zip(*(record_batch[c].to_pylist() for c in columns), strict=True)

    def run(
        self,
        plan_path: StagePath | Path,
        output: CheckpointedOutput,
        done: set[str],
        summary: ExecuteSummary,
        progress: Progress,
    ) -> None:
        """Embed the planned inputs not in `done` into `output`, which checkpoints them."""
        loading = time.perf_counter()
        runner = self.get_runner()
        summary.load_seconds = time.perf_counter() - loading
        stats = summary.stats
        if runner.calibrating:  # choose the path on typical inputs, not the plan's shortest
            before = getattr(runner, "calibration_seconds", 0.0)
            size = getattr(runner, "calibration_inputs", 4 * SAMPLE_INPUTS)  # int8 wants more
            runner.calibrate(_middle_inputs(plan_path, done, progress.total, size))
            stats.calibration_seconds += getattr(runner, "calibration_seconds", 0.0) - before
        progress.working()  # the rate counts from here: load and calibration are setup
        if runner.dimension != self.dimension:
            raise RuntimeError(
                f"the loaded model embeds into {runner.dimension} dimensions, its files say "
                f"{self.dimension}"
            )
        in_flight: dict[int, str] = {}  # plan position -> input hash, until its vector is back
        next_position = 0

        def batches() -> Iterator[PlannedBatch]:
            nonlocal next_position
            for planned in _planned_batches(plan_path):
                todo = [row for row in planned if row[0] not in done]
                if todo:
                    positions = list(range(next_position, next_position + len(todo)))
                    next_position += len(todo)
                    hashes, texts, token_ids = (list(column) for column in zip(*todo, strict=True))
                    in_flight.update(zip(positions, hashes, strict=True))
                    yield positions, texts, token_ids

        tokens_seen = 0
        for positions, vectors in runner.run(batches(), stats):
            progress.advance(len(positions), stats.tokens - tokens_seen)
            tokens_seen = stats.tokens
            now = datetime.now(UTC)
            table = pa.table(
                {
                    "input_hash": [in_flight.pop(p) for p in positions],
                    "vector": pa.FixedSizeListArray.from_arrays(
                        pa.array(vectors.reshape(-1)), runner.dimension
                    ),
                    "embedded_at": pa.array([now] * len(positions), pa.timestamp("us", "UTC")),
                },
                schema=self.rows,
            )
            output.add(table)
        progress.advance(len(stats.failed), stats.tokens - tokens_seen)  # failed inputs: done
        summary.failed_inputs.update({in_flight[p]: why for p, why in stats.failed.items()})
        summary.device, summary.dtype, summary.backend = runner.device, runner.dtype, runner.backend
        summary.dtype_decision = getattr(runner, "dtype_decision", None)
