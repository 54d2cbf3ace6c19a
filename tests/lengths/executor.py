"""The lengths product's executor: plan keeps the stale documents, execute buckets them. It
runs no model, so it never calls `load`; its output goes through the frame's checkpointed
skeleton (`stages.checkpointed`), as every executor's does."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from batch_pipeline.executors import Capabilities, ExecuteOptions
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.state.staging import StagePath, StageWriter, read_table

PLANNED = pa.schema([("input_hash", pa.string()), ("size", pa.int64())])
BUCKETED = pa.schema([("input_hash", pa.string()), ("bucket", pa.int32())])


@dataclass
class Counted:
    """A stage's summary: how many inputs it handled."""

    inputs: int

    def metadata(self) -> dict[str, object]:
        return {"inputs": self.inputs}


def bucket_of(size: int, bounds: list[int]) -> int:
    """The first bucket whose bound holds `size`; past the last bound, one more."""
    return next((i for i, bound in enumerate(bounds) if size <= bound), len(bounds))


@dataclass(frozen=True)
class LengthExecutor:
    capabilities: ClassVar[Capabilities] = Capabilities()  # runs no model
    bounds: list[int]

    def plan(self, prepared: StagePath, out: StagePath, options: ExecuteOptions) -> Counted:
        started = time.perf_counter()
        rows = read_table(prepared, ["input_hash", "size", "stale"]).to_pylist()
        stale = {r["input_hash"]: r["size"] for r in rows if r["stale"]}  # each input once
        with StageWriter(out, PLANNED, started) as writer:
            writer.write_table(
                pa.table({"input_hash": list(stale), "size": list(stale.values())}, PLANNED)
            )
        return Counted(len(stale))

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], Any],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> Counted:
        started = time.perf_counter()
        rows = read_table(planned, ["input_hash", "size"]).to_pylist()
        with CheckpointedOutput(out, checkpoints, BUCKETED, started=started) as output:
            done = output.resume({r["input_hash"] for r in rows} & output.done_keys)
            todo = [r for r in rows if r["input_hash"] not in done]
            output.add(
                pa.table(
                    {
                        "input_hash": [r["input_hash"] for r in todo],
                        "bucket": [bucket_of(r["size"], self.bounds) for r in todo],
                    },
                    BUCKETED,
                )
            )
            record = {
                "inputs": len(todo),
                "inputs_resumed": len(done),
                "tokens": 0,
                "seconds": time.perf_counter() - started,
                "device": "cpu" if todo else None,
            }
            output.finish(record, planned)
        return Counted(len(rows))
