"""Execute's output, checkpointed: the one skeleton every executor's execute writes through.

An execute opens a `CheckpointedOutput` over its output file and its partition's checkpoint
folder. On entry it finds what earlier (interrupted) runs checkpointed; `resume(wanted)`
copies the rows of the inputs this plan asks for into the output, marked `resumed`; `add`
writes each table of new rows, marked computed, and keeps it for the next checkpoint, which
is written every `every` tables (`checkpoint_every` batches, or one chunk of prompts) and at
the end; `finish(record, plan)` writes the footer land reads: the execute's record and the
plan stage's seconds. A crash loses at most what no checkpoint holds, and the checkpoint
count is where a crash can be injected (`faults.crash_point("execute", n)`).

Every local execute (embed, generate and score; in process, or through `vllm run-batch`)
is the one loop `execute_checkpointed`. A family gives a `CheckpointedRun`: its rows, its
summary, its planned keys and its step. The loop resumes, counts progress, loads nothing
when nothing is left, and writes the footer. A provider's Batch API writes through the same
output (`executors.provider_execute`). The output's schema metadata names the checkpoint
folders it used, for land to remove once their rows are in the table.
"""

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from batch_pipeline.faults import crash_point
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages import EXECUTE
from batch_pipeline.stages.outcome import ExecuteOutcome
from batch_pipeline.state.checkpoints import (
    marked,
    not_finite,
    open_checkpoints,
    without,
    write_part,
    write_resumed,
)
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
        self.refused: dict[str, str] = {}  # input_hash -> why: rows no table can hold
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
        (`copied` hears each table of them, for a caller that counts). A checkpointed row no
        table can hold is not copied, nor counted done: this run computes it again."""
        written = write_resumed(self.writer, self.parts, wanted, self.rows, copied)
        self.done_keys -= (wanted & self.done_keys) - written
        return written

    def add(self, table: pa.Table, checkpointed: bool = True) -> set[str]:
        """New rows: into the output, and into a checkpoint every `every` tables; rows a
        rerun must compute again (`checkpointed=False`) into the output only. A row whose
        vector or score is not a finite number is neither: it is its input's failure
        (`refused`, which `finish` adds to the execute's), so the rest lands and the next
        run computes it again. Returns the inputs refused so."""
        refused = not_finite(table)
        if refused:
            self.refused.update(refused)
            self.done_keys -= set(refused)
            table = without(table, refused)
        self.writer.write_table(marked(table, resumed=False))
        if not checkpointed:
            return set(refused)
        self.pending.append(table)
        self.added += 1
        if self.added % self.every == 0:
            self.checkpoint()
        return set(refused)

    def checkpoint(self) -> None:
        """Write what no checkpoint holds yet (nothing when nothing is pending)."""
        if not self.pending:
            return
        if self.own is not None:
            write_part(self.own, pa.concat_tables(self.pending))
        self.pending = []
        self.checkpoints += 1
        crash_point("execute", self.checkpoints)

    def finish(self, summary, plan_path: StagePath | Path, **extra: object) -> None:  # noqa: ANN001
        """The last checkpoint, and the footer land reads: the execute's `summary` (its
        record, with the refused rows among its failed inputs, and any `extra` fields), or a
        record of the executor's own (a dict: the refused rows under its `failed`), and the
        plan's seconds (land never sees the plan file: execute carries them forward)."""
        self.checkpoint()
        if isinstance(summary, dict):
            failed = {**summary.get("failed", {}), **self.refused}
            record = {**summary, **({"failed": failed} if failed else {})}
        else:
            summary.failed_inputs.update(self.refused)
            record = summary.record()
        planned = stage_summary(plan_path).get(STAGE_SECONDS)
        self.writer.summary = {**record, **extra, PLAN_SECONDS: planned}


class CheckpointedRun:
    """What one family's local execute gives `execute_checkpointed`: the rows it computes, how
    it counts progress, and its step. Embed, generate and score (in process, or through
    `vllm run-batch`) differ only in these; the loop around them is written once."""

    rows: pa.Schema  # the computed rows' schema
    unit: str = "inputs"  # what progress counts
    token_unit: str = "tokens"  # what the ETA is reckoned in, where `planned` counts tokens
    every: int = DEFAULT_CHECKPOINT_EVERY  # tables between checkpoints

    def start(self, plan_path: StagePath | Path) -> ExecuteOutcome:
        """The summary as the plan starts it, before anything runs."""
        raise NotImplementedError

    def planned(self, plan_path: StagePath | Path) -> Iterator[tuple[str, int]]:
        """Each planned input's key and its tokens (0 where the ETA is not in tokens),
        streamed."""
        raise NotImplementedError

    def counted(self, summary: ExecuteOutcome) -> Callable[[pa.Table], None] | None:
        """What hears each table of resumed rows, for a family that counts them."""
        return None

    def run(
        self,
        plan_path: StagePath | Path,
        output: "CheckpointedOutput",
        done: set[str],
        summary: ExecuteOutcome,
        progress: Progress,
    ) -> None:
        """Compute the planned inputs not in `done` into `output`, counting into `summary`:
        load the engine, tell `progress` when the work starts, and advance it."""
        raise NotImplementedError

    def finished(self, summary: ExecuteOutcome) -> None:
        """A last check of the whole execute, before its footer is written."""


def execute_checkpointed(
    family: CheckpointedRun,
    plan_path: StagePath | Path,
    out_path: StagePath | Path,
    checkpoint_dir: StagePath | Path | None = None,
    progress: ProgressSink | None = None,
    progress_interval: float = 15.0,
) -> ExecuteOutcome:
    """The one checkpointed loop of every local execute: resume what checkpoints hold of
    this plan, run the rest through `family` (nothing loads when nothing is left), and
    write the footer. The plan is streamed: memory holds the keys resumed, not the plan."""
    started = time.perf_counter()
    summary = family.start(plan_path)
    with CheckpointedOutput(out_path, checkpoint_dir, family.rows, family.every, started) as output:
        wanted: set[str] = set()  # checkpointed inputs that this plan asks for
        todo = tokens = 0
        for key, count in family.planned(plan_path):
            if key in output.done_keys:
                wanted.add(key)
            else:
                todo, tokens = todo + 1, tokens + count
        done = output.resume(wanted, family.counted(summary))
        summary.resumed_inputs = len(done)
        todo += len(wanted - done)  # checkpointed rows no table can hold: computed again
        if todo:
            tracker = Progress(
                EXECUTE.name,
                todo,
                progress,
                unit=family.unit,
                interval=progress_interval,
                total_tokens=tokens,
                token_unit=family.token_unit,
            )
            tracker.start()  # before the engine loads: the total is known now
            family.run(plan_path, output, done, summary, tracker)
            tracker.finish()
        family.finished(summary)
        output.finish(summary, plan_path)
    return summary
