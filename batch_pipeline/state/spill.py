"""External partitioning on local scratch disk: how stages keep memory bounded at any size.

A stage that must regroup more rows than it wants to hold (the plan's de-duplication by input
hash, land's join of vectors back onto chunks) spills them into numbered bucket files and then
reads one bucket at a time. Buckets are Arrow IPC streams (LZ4-compressed) in a temporary
folder that is removed on exit. (Not Parquet: a Parquet writer keeps every row group's metadata
until it closes, so many small appends to many buckets grew memory with the corpus.)
"""

import tempfile
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

from batch_pipeline.state.staging import StagePath, as_stage_path

SPILL_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def bucket_count(rows: int, rows_per_bucket: int) -> int:
    """How many buckets hold `rows` rows at about `rows_per_bucket` each (at least one)."""
    return max(1, -(-int(rows) // rows_per_bucket))


def hash_buckets(keys: Iterable[str], buckets: int) -> np.ndarray:
    """A bucket number per key (an input hash): equal keys always share a bucket."""
    if buckets == 1:  # the common case (a corpus that fits one bucket): nothing to hash
        return np.zeros(sum(1 for _ in keys), dtype=np.int64)
    return np.fromiter((zlib.crc32(k.encode()) % buckets for k in keys), dtype=np.int64)


class BucketSpill:
    """Rows of one schema spilled into bucket files; read back one whole bucket at a time."""

    def __init__(self, directory: Path, name: str, schema: pa.Schema) -> None:
        self.directory = Path(directory)
        self.name = name
        self.schema = schema
        self._writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}

    def _path(self, bucket: int) -> Path:
        return self.directory / f"{self.name}-{bucket:06d}.arrows"

    def add(self, table: pa.Table | pa.RecordBatch, buckets: np.ndarray) -> None:
        """Append each row of `table` to the bucket given for it in `buckets`."""
        if not len(buckets):
            return
        table = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
        order = np.argsort(buckets, kind="stable")
        ordered = buckets[order]
        table = table.take(pa.array(order)).cast(self.schema)
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], len(ordered)]
        for start, end in zip(starts, ends, strict=True):
            bucket = int(ordered[start])
            if bucket not in self._writers:
                self._writers[bucket] = pa.ipc.new_stream(
                    str(self._path(bucket)), self.schema, options=SPILL_OPTIONS
                )
            self._writers[bucket].write_table(table.slice(start, end - start))

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()

    def buckets(self) -> list[int]:
        return sorted(self._writers)

    def read(self, bucket: int) -> pa.Table:
        """One bucket's rows, in the order they were added (empty if none were)."""
        if bucket not in self._writers:
            return self.schema.empty_table()
        with pa.ipc.open_stream(str(self._path(bucket))) as reader:
            return reader.read_all()


def scratch_dir(near: StagePath | Path) -> tempfile.TemporaryDirectory:
    """A temporary folder for spills: beside the stage file `near` when staging is local
    (same disk), else in the system's temporary folder (`TMPDIR`)."""
    local = as_stage_path(near).local_path
    parent = local.parent if local is not None and local.parent.is_dir() else None
    return tempfile.TemporaryDirectory(prefix="batch-pipeline-spill-", dir=parent)
