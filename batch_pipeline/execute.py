"""Stage 4, execute: run the batch plan and stream the vectors to staging.

The output holds one row per planned input (`input_hash`, `vector`, `embedded_at`); inputs that
failed on their own are listed in the summary with their reason instead.
"""

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from batch_pipeline.faults import crash_point
from batch_pipeline.inference import EmbeddingRunner, RunStats
from batch_pipeline.staging import (
    StagePath,
    StageWriter,
    as_stage_path,
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


def _checkpointed(checkpoint_dir: StagePath, wanted: set[str], dimension: int) -> pa.Table:
    """Vectors of `wanted` inputs already written by earlier (interrupted) runs."""
    schema = embeddings_schema(dimension)
    parts = [
        checkpoint_dir.child(info)
        for info in sorted(checkpoint_dir.files(), key=lambda info: info.path)
        if info.base_name.startswith("part-") and info.base_name.endswith(".parquet")
    ]
    tables = []
    for part in parts:
        try:
            table = read_table(part).cast(schema)
        except (OSError, pa.ArrowInvalid):
            continue  # a torn file cannot exist (written then moved), but never trust it
        keep = pc.is_in(table["input_hash"], pa.array(sorted(wanted), pa.string()))
        tables.append(table.filter(keep))
    if not tables:
        return schema.empty_table()
    merged = pa.concat_tables(tables)
    _, first = np.unique(
        np.asarray(merged["input_hash"].to_pylist(), dtype=object), return_index=True
    )
    return merged.take(pa.array(np.sort(first)))


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
    without loading the model.
    """
    stats = RunStats()
    schema = embeddings_schema(dimension)
    planned = set(read_table(plan_path, ["input_hash"])["input_hash"].to_pylist())
    done = (
        _checkpointed(as_stage_path(checkpoint_dir), planned, dimension)
        if checkpoint_dir is not None and planned
        else schema.empty_table()
    )
    done_keys = set(done["input_hash"].to_pylist())
    if not planned - done_keys:
        with StageWriter(out_path, schema) as writer:
            writer.write_table(done)
        return ExecuteSummary(
            stats=stats,
            device="none (nothing to embed)",
            dtype="none",
            dimension=dimension,
            resumed_inputs=done.num_rows,
        )
    runner = get_runner()
    if runner.dimension != dimension:
        raise RuntimeError(
            f"the loaded model embeds into {runner.dimension} dimensions, its files say {dimension}"
        )
    keys: list[str] = []  # input hash by position in the plan

    def batches() -> Iterator[tuple[list[int], list[str]]]:
        for hashes, texts in _planned_batches(plan_path):
            todo = [(h, t) for h, t in zip(hashes, texts, strict=True) if h not in done_keys]
            if todo:
                start = len(keys)
                keys.extend(h for h, _ in todo)
                yield list(range(start, start + len(todo))), [t for _, t in todo]

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
        writer.write_table(done)
        for n, (positions, vectors) in enumerate(runner.run(batches(), stats), start=1):
            now = datetime.now(UTC)
            table = pa.table(
                {
                    "input_hash": [keys[p] for p in positions],
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
        failed_inputs={keys[p]: reason for p, reason in stats.failed.items()},
        resumed_inputs=done.num_rows,
    )
