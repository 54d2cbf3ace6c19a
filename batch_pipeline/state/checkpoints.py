"""Execute's checkpoints: what an interrupted run already computed, found and copied forward.

An execute writes its results to `<checkpoint_dir>/<writer>/part-*.parquet` as it goes, each
part written then moved into place. A retry reads the parts every earlier writer left, takes
the inputs they hold instead of computing them again, and copies their rows into its own
output marked `resumed`. Land removes the folders once their rows are in the table. Parts
are keyed by `input_hash`; the rest of their schema is the stage's own (vectors for
embeddings, texts for generations).
"""

import json
import posixpath
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from batch_pipeline.state.staging import (
    StagePath,
    StageWriter,
    as_stage_path,
    parquet_file,
    read_batches,
    read_table,
    schema_metadata,
)

CHECKPOINTS_KEY = b"checkpoints"  # in an execute output's schema: the folders it used


@dataclass(frozen=True)
class Checkpoints:
    """What an execute found of earlier runs' checkpoints, and where it writes its own."""

    parts: list[StagePath]  # earlier runs' parts still there
    done_keys: set[str]  # the inputs they hold
    own: StagePath | None  # this execute's folder (None: it does not checkpoint)
    used: list[str]  # the folders it resumed from and its own: land removes them

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        """`schema` naming the folders used, for land to find."""
        return schema.with_metadata({CHECKPOINTS_KEY: json.dumps(self.used)})


def open_checkpoints(checkpoint_dir: "StagePath | Path | None", schema: pa.Schema) -> Checkpoints:
    """The checkpoints in `checkpoint_dir` with `schema`, and a new folder for this writer."""
    if checkpoint_dir is None:
        return Checkpoints([], set(), None, [])
    folder = as_stage_path(checkpoint_dir)
    parts, done_keys = checkpointed_keys(checkpoint_parts(folder, schema))
    own = folder / uuid.uuid4().hex
    used = {posixpath.relpath(part.path, folder.path).split("/", 1)[0] for part in parts}
    return Checkpoints(parts, done_keys, own, sorted(used | {own.name}))


def write_part(folder: StagePath, rows: pa.Table) -> None:
    """One checkpoint part in this writer's folder (written, then moved into place)."""
    (folder / f"part-{uuid.uuid4().hex}.parquet").write_table(rows)


def checkpoints_used(output_path: "StagePath | Path") -> list[str] | None:
    """The checkpoint folders an execute output wrote or resumed from (None: not recorded)."""
    recorded = schema_metadata(output_path).get(CHECKPOINTS_KEY)
    return None if recorded is None else json.loads(recorded)


def marked(table: pa.Table, resumed: bool) -> pa.Table:
    """`table` with a `resumed` column: taken from a checkpoint, not computed by this run."""
    return table.append_column("resumed", pa.array([resumed] * table.num_rows, pa.bool_()))


def checkpoint_parts(checkpoint_dir: StagePath, schema: pa.Schema) -> list[StagePath]:
    """Readable checkpoint files of earlier (interrupted) runs, oldest name first."""
    parts = []
    for info in sorted(checkpoint_dir.files(recursive=True), key=lambda info: info.path):
        if not (info.base_name.startswith("part-") and info.base_name.endswith(".parquet")):
            continue
        part = checkpoint_dir.child(info)
        try:
            if parquet_file(part).schema_arrow.names == schema.names:
                parts.append(part)
        except (OSError, pa.ArrowInvalid):
            continue  # torn (cannot be: written then moved) or landed and removed meanwhile
    return parts


def checkpointed_keys(parts: list[StagePath]) -> tuple[list[StagePath], set[str]]:
    """The parts still there, and the inputs they hold."""
    present, keys = [], set()
    for part in parts:
        try:
            keys.update(read_table(part, ["input_hash"])[0].to_pylist())
        except OSError:
            continue  # a concurrent run of this partition landed these and removed them
        present.append(part)
    return present, keys


def write_resumed(
    writer: StageWriter,
    parts: list[StagePath],
    wanted: set[str],
    schema: pa.Schema,
    copied: Callable[[pa.Table], None] | None = None,
) -> set[str]:
    """Copy the checkpointed rows of `wanted` inputs, each once, streaming the parts; each
    table of copied rows is also handed to `copied`, for a caller that counts them.

    Returns the inputs copied. A part that vanishes while read (landed and removed by a
    concurrent run) is skipped: the caller computes what it did not copy.
    """
    written: set[str] = set()
    for part in parts:
        try:
            for record_batch in read_batches(part):
                keys = record_batch["input_hash"].to_pylist()
                keep = [i for i, k in enumerate(keys) if k in wanted and k not in written]
                if keep:
                    rows = pa.Table.from_batches([record_batch]).take(pa.array(keep, pa.int64()))
                    writer.write_table(marked(rows.cast(schema), True))
                    if copied is not None:
                        copied(rows)
                    written.update(keys[i] for i in keep)
        except OSError:
            continue
    return written
