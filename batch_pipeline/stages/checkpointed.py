"""Execute's output, checkpointed: the one skeleton every executor's execute writes through.

An execute opens a `CheckpointedOutput` over its output file and its partition's checkpoint
folder. On entry it finds what earlier (interrupted) runs checkpointed; `resume(wanted)`
copies the rows of the inputs this plan asks for into the output, marked `resumed`; `add`
writes each table of new rows, marked computed, and keeps it for the next checkpoint, which
is written every `every` tables (`checkpoint_every` batches, or one chunk of prompts) and at
the end; `finish(record, plan)` writes the footer land reads: the execute's record and the
plan stage's seconds. A crash loses at most what no checkpoint holds, and the checkpoint
count is where a crash can be injected (`faults.crash_point("execute", n)`).

The embedding executor (`stages.execute`) and the generation executor (`stages.generate`)
differ only in what they compute and record; the output's schema metadata names the
checkpoint folders it used, for land to remove once their rows are in the table.
"""

import time
from pathlib import Path

import pyarrow as pa

from batch_pipeline.faults import crash_point
from batch_pipeline.state.checkpoints import marked, open_checkpoints, write_part, write_resumed
from batch_pipeline.state.staging import STAGE_SECONDS, StagePath, StageWriter, stage_summary

PLAN_SECONDS = "plan_seconds"  # the plan stage's seconds, carried in execute's footer
DEFAULT_CHECKPOINT_EVERY = 8  # tables (batches) between checkpoints, unless a run asks otherwise


class CheckpointedOutput:
    """An execute's output file and its checkpoints (see the module docstring); a context
    manager: the output appears whole on a clean exit, and not at all otherwise."""

    def __init__(
        self,
        out_path: StagePath | Path,
        checkpoint_dir: StagePath | Path | None,
        rows: pa.Schema,
        every: int = DEFAULT_CHECKPOINT_EVERY,
        started: float | None = None,
    ) -> None:
        self.rows = rows  # the computed rows' schema (the checkpoint files' too)
        self.every = max(1, every)
        found = open_checkpoints(checkpoint_dir, rows)
        self.parts, self.done_keys, self.own = found.parts, found.done_keys, found.own
        schema = found.output_schema(rows.append(pa.field("resumed", pa.bool_(), False)))
        self.writer = StageWriter(out_path, schema, started or time.perf_counter())
        self.pending: list[pa.Table] = []
        self.added = 0  # tables added by this run
        self.checkpoints = 0  # checkpoints written by this run

    def __enter__(self) -> "CheckpointedOutput":
        self.writer.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.writer.__exit__(*exc)

    def resume(self, wanted: set[str], copied=None) -> set[str]:  # noqa: ANN001
        """Copy the checkpointed rows of the `wanted` inputs, each once; the inputs copied
        (`copied` hears each table of them, for a caller that counts)."""
        return write_resumed(self.writer, self.parts, wanted, self.rows, copied)

    def add(self, table: pa.Table, checkpointed: bool = True) -> None:
        """New rows: into the output, and into a checkpoint every `every` tables; rows a
        rerun must compute again (`checkpointed=False`) into the output only."""
        self.writer.write_table(marked(table, resumed=False))
        if not checkpointed:
            return
        self.pending.append(table)
        self.added += 1
        if self.added % self.every == 0:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write what no checkpoint holds yet (nothing when nothing is pending)."""
        if not self.pending:
            return
        if self.own is not None:
            write_part(self.own, pa.concat_tables(self.pending))
        self.pending = []
        self.checkpoints += 1
        crash_point("execute", self.checkpoints)

    def finish(self, record: dict[str, object], plan_path: StagePath | Path) -> None:
        """The last checkpoint, and the footer land reads: `record` and the plan's seconds
        (land never sees the plan file: execute carries them forward)."""
        self.checkpoint()
        planned = stage_summary(plan_path).get(STAGE_SECONDS)
        self.writer.summary = {**record, PLAN_SECONDS: planned}
