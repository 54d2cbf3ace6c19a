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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def not_finite(table: pa.Table) -> dict[str, str]:
    """The rows of `table` that no table can hold, by `input_hash`, with the reason: a
    vector or score that is NaN or infinite (a provider's answer, or an overflow in the
    model). LanceDB refuses a vector column holding NaN, so such a row would block every
    land of its partition; it is its input's failure instead, computed again next run."""
    bad: dict[str, str] = {}
    if table.num_rows == 0:
        return bad
    keys = table["input_hash"]
    for field in table.schema:
        kind = field.type
        if pa.types.is_fixed_size_list(kind) and pa.types.is_floating(kind.value_type):
            array = table[field.name].combine_chunks()
            size = kind.list_size
            values = array.values.slice(array.offset * size, len(array) * size)
            finite = np.isfinite(values.to_numpy(zero_copy_only=False).reshape(-1, size))
            rows = ~finite.all(axis=1) & array.is_valid().to_numpy(zero_copy_only=False)
            what = f"{field.name} has values that are not finite numbers"
        elif pa.types.is_floating(kind):
            values = table[field.name].to_numpy()
            rows = ~np.isfinite(values) & table[field.name].is_valid().to_numpy()
            what = f"{field.name} is not a finite number"
        else:
            continue
        for row in np.flatnonzero(rows):
            bad.setdefault(keys[int(row)].as_py(), f"malformed answer: {what}")
    return bad


def unlandable_parts(staging: StagePath) -> dict[str, int]:
    """The checkpoint parts under `staging` holding rows no table can hold (`not_finite`),
    by their path under it, with how many: `doctor` names them; the next run of their
    partition computes those rows again instead of resuming them, and drops the parts once
    it lands."""
    found: dict[str, int] = {}
    for info in sorted(staging.files(recursive=True), key=lambda info: info.path):
        relative = posixpath.relpath(info.path, staging.path)
        name = info.base_name
        if "/checkpoints/" not in f"/{relative}" or not name.startswith("part-"):
            continue
        try:
            count = sum(
                len(not_finite(pa.Table.from_batches([batch])))
                for batch in read_batches(staging.child(info))
            )
        except (OSError, pa.ArrowInvalid, KeyError):
            continue  # landed and removed meanwhile, torn, or not a checkpoint of ours
        if count:
            found[relative] = count
    return found


def without(table: pa.Table, keys: "set[str] | dict[str, str]") -> pa.Table:
    """`table` without the rows of `keys`."""
    if not keys:
        return table
    drop = pa.array(list(keys), pa.string())
    return table.filter(pc.invert(pc.is_in(table["input_hash"], value_set=drop)))


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
    concurrent run) is skipped: the caller computes what it did not copy; so is a row no
    table can hold (`not_finite`: written by an earlier version, or by hand), which this
    run computes again instead, and the part goes with the others once this run lands.
    """
    written: set[str] = set()
    for part in parts:
        try:
            for record_batch in read_batches(part):
                keys = record_batch["input_hash"].to_pylist()
                keep = [i for i, k in enumerate(keys) if k in wanted and k not in written]
                if keep:
                    rows = pa.Table.from_batches([record_batch]).take(pa.array(keep, pa.int64()))
                    unfit = not_finite(rows)
                    rows = without(rows, unfit)
                    if rows.num_rows == 0:
                        continue
                    writer.write_table(marked(rows.cast(schema), True))
                    if copied is not None:
                        copied(rows)
                    written.update(rows["input_hash"].to_pylist())
        except OSError:
            continue
    return written
