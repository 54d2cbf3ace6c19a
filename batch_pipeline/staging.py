"""Columnar hand-off between stages: one Parquet file per stage, run and collection.

Files live at `<staging_dir>/<collection>/<run_id>/<stage>.parquet`. Writers append record
batches as they go and readers stream them, so memory stays bounded as a corpus grows.
"""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

WRITE_BATCH_ROWS = 512


def stage_path(staging_dir: Path, collection: str, run_id: str, stage: str) -> Path:
    path = Path(staging_dir) / collection / run_id / f"{stage}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class StageWriter:
    """Buffers rows and writes them to Parquet in record batches; always writes a file."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = Path(path)
        self.schema = schema
        self.rows = 0
        self._buffer: list[dict] = []
        self._tmp = self.path.with_suffix(".parquet.tmp")
        self._writer = pq.ParquetWriter(self._tmp, schema)

    def write(self, row: dict) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= WRITE_BATCH_ROWS:
            self.flush()

    def write_table(self, table: pa.Table) -> None:
        self.flush()
        self._writer.write_table(table.cast(self.schema))
        self.rows += table.num_rows

    def flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_pylist(self._buffer, schema=self.schema))
            self.rows += len(self._buffer)
            self._buffer = []

    def close(self) -> None:
        self.flush()
        self._writer.close()
        self._tmp.replace(self.path)  # readers only ever see a complete file

    def __enter__(self) -> "StageWriter":
        return self

    def __exit__(self, exc_type, *_) -> None:  # noqa: ANN001
        if exc_type is None:
            self.close()
        else:
            self._writer.close()
            self._tmp.unlink(missing_ok=True)


def read_batches(
    path: Path, columns: list[str] | None = None, batch_rows: int = 2048
) -> Iterator[pa.RecordBatch]:
    yield from pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns)


def is_full_pass(collected_path: Path) -> bool:
    """Whether a collect output covers the whole source (not a targeted run)."""
    metadata = pq.read_schema(collected_path).metadata or {}
    return metadata.get(b"mode") == b"full"


def read_table(path: Path, columns: list[str] | None = None, filters=None) -> pa.Table:  # noqa: ANN001
    return pq.read_table(path, columns=columns, filters=filters)


def prune_runs(staging_dir: Path, collection: str, keep: set[str], keep_latest: int) -> int:
    """Delete staging folders of older runs, keeping `keep` and the `keep_latest` newest."""
    root = Path(staging_dir) / collection
    if not root.is_dir():
        return 0
    runs = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    removed = 0
    for path in runs[: max(0, len(runs) - keep_latest)]:
        if path.name not in keep:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed
