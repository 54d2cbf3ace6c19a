"""Stage 4, execute: run the batch plan and stream the vectors to staging.

The output holds one row per planned input (`input_hash`, `vector`, `embedded_at`); inputs that
failed on their own are listed in the summary with their reason instead.
"""

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from batch_pipeline.faults import crash_point
from batch_pipeline.inference import EmbeddingRunner, RunStats
from batch_pipeline.staging import (
    StagePath,
    StageWriter,
    as_stage_path,
    parquet_file,
    read_batches,
    read_table,
)


def embeddings_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("embedded_at", pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )


@dataclass
class ExecuteSummary:
    stats: RunStats
    device: str
    dtype: str
    dimension: int
    failed_inputs: dict[str, str] = field(default_factory=dict)  # input_hash -> reason
    resumed_inputs: int = 0  # taken from checkpoints of an interrupted run

    def metadata(self) -> dict[str, object]:
        s = self.stats
        return {
            "chunks_embedded": s.inputs,
            "inputs_resumed_from_checkpoint": self.resumed_inputs,
            "inputs_failed": len(self.failed_inputs),
            "tokens": s.tokens,
            "padded_tokens": s.padded_tokens,
            "padding_efficiency": round(s.tokens / s.padded_tokens, 4) if s.padded_tokens else 1.0,
            "batches_run": s.batches,
            "seconds": round(s.seconds, 3),
            "tokens_per_second": round(s.tokens_per_second, 1),
            "oom_splits": s.oom_splits,
            "device": self.device,
            "dtype": self.dtype,
            "embedding_dimension": self.dimension,
        }


def _planned_batches(plan_path: StagePath | Path) -> Iterator[tuple[list[str], list[str]]]:
    """(input hashes, input texts) per planned batch, streamed in plan order."""
    hashes: list[str] = []
    texts: list[str] = []
    current = None
    for record_batch in read_batches(plan_path, ["batch_index", "input_hash", "input_text"]):
        columns = record_batch.to_pydict()
        for index, key, text in zip(
            columns["batch_index"], columns["input_hash"], columns["input_text"], strict=True
        ):
            if index != current and hashes:
                yield hashes, texts
                hashes, texts = [], []
            current = index
            hashes.append(key)
            texts.append(text)
    if hashes:
        yield hashes, texts


def _checkpoint_parts(checkpoint_dir: StagePath, dimension: int) -> list[StagePath]:
    """Readable checkpoint files of earlier (interrupted) runs, oldest name first."""
    schema = embeddings_schema(dimension)
    parts = []
    for info in sorted(checkpoint_dir.files(), key=lambda info: info.path):
        if not (info.base_name.startswith("part-") and info.base_name.endswith(".parquet")):
            continue
        part = checkpoint_dir.child(info)
        try:
            if parquet_file(part).schema_arrow.names == schema.names:
                parts.append(part)
        except (OSError, pa.ArrowInvalid):
            continue  # a torn file cannot exist (written then moved), but never trust it
    return parts


def _write_resumed(
    writer: StageWriter, parts: list[StagePath], wanted: set[str], dimension: int
) -> int:
    """Copy the checkpointed vectors of `wanted` inputs, each once, streaming the parts."""
    schema = embeddings_schema(dimension)
    written: set[str] = set()
    for part in parts:
        for record_batch in read_batches(part):
            keys = record_batch["input_hash"].to_pylist()
            keep = [i for i, k in enumerate(keys) if k in wanted and k not in written]
            written.update(keys[i] for i in keep)
            if keep:
                rows = pa.Table.from_batches([record_batch]).take(pa.array(keep, pa.int64()))
                writer.write_table(rows.cast(schema))
    return len(written)


def execute_plan(
    plan_path: StagePath | Path,
    out_path: StagePath | Path,
    get_runner: Callable[[], EmbeddingRunner],
    dimension: int,
    checkpoint_dir: StagePath | Path | None = None,
    checkpoint_every: int = 8,
) -> ExecuteSummary:
    """Embed the plan, checkpointing every `checkpoint_every` batches to `checkpoint_dir`.

    Inputs found in checkpoints (from a run that was killed) are not embedded again, so a
    retry recomputes at most one checkpoint interval. An empty plan writes an empty file
    without loading the model. The plan is streamed: memory holds the batches in flight, not
    the plan.
    """
    stats = RunStats()
    schema = embeddings_schema(dimension)
    parts = (
        _checkpoint_parts(as_stage_path(checkpoint_dir), dimension)
        if checkpoint_dir is not None
        else []
    )
    done_keys = {k for part in parts for k in read_table(part, ["input_hash"])[0].to_pylist()}
    resumed: set[str] = set()  # checkpointed inputs that this plan asks for
    todo_count = 0
    for record_batch in read_batches(plan_path, ["input_hash"], batch_rows=65536):
        for key in record_batch["input_hash"].to_pylist():
            if key in done_keys:
                resumed.add(key)
            else:
                todo_count += 1
    if not todo_count:
        with StageWriter(out_path, schema) as writer:
            resumed_inputs = _write_resumed(writer, parts, resumed, dimension)
        return ExecuteSummary(
            stats=stats,
            device="none (nothing to embed)",
            dtype="none",
            dimension=dimension,
            resumed_inputs=resumed_inputs,
        )
    runner = get_runner()
    if runner.dimension != dimension:
        raise RuntimeError(
            f"the loaded model embeds into {runner.dimension} dimensions, its files say {dimension}"
        )
    in_flight: dict[int, str] = {}  # plan position -> input hash, until its vector is back
    next_position = 0

    def batches() -> Iterator[tuple[list[int], list[str]]]:
        nonlocal next_position
        for hashes, texts in _planned_batches(plan_path):
            todo = [(h, t) for h, t in zip(hashes, texts, strict=True) if h not in done_keys]
            if todo:
                positions = list(range(next_position, next_position + len(todo)))
                next_position += len(todo)
                in_flight.update(zip(positions, (h for h, _ in todo), strict=True))
                yield positions, [t for _, t in todo]

    pending: list[pa.Table] = []
    checkpoints = 0

    def checkpoint() -> None:
        nonlocal pending, checkpoints
        if checkpoint_dir is None or not pending:
            return
        (as_stage_path(checkpoint_dir) / f"part-{uuid.uuid4().hex}.parquet").write_table(
            pa.concat_tables(pending)
        )
        pending = []
        checkpoints += 1
        crash_point("execute", checkpoints)

    with StageWriter(out_path, schema) as writer:
        resumed_inputs = _write_resumed(writer, parts, resumed, dimension)
        for n, (positions, vectors) in enumerate(runner.run(batches(), stats), start=1):
            now = datetime.now(UTC)
            table = pa.table(
                {
                    "input_hash": [in_flight.pop(p) for p in positions],
                    "vector": pa.FixedSizeListArray.from_arrays(
                        pa.array(vectors.reshape(-1)), runner.dimension
                    ),
                    "embedded_at": pa.array([now] * len(positions), pa.timestamp("us", "UTC")),
                },
                schema=schema,
            )
            writer.write_table(table)
            pending.append(table)
            if n % max(1, checkpoint_every) == 0:
                checkpoint()
        checkpoint()
    return ExecuteSummary(
        stats=stats,
        device=runner.device,
        dtype=runner.dtype,
        dimension=runner.dimension,
        failed_inputs={in_flight[p]: reason for p, reason in stats.failed.items()},
        resumed_inputs=resumed_inputs,
    )
