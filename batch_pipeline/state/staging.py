"""Columnar hand-off between stages: one Parquet file per stage, run and partition.

Files live at `<staging>/<partition>/<run_id>/<stage>.parquet`, where the staging location is a
local folder or an object store prefix (`s3://bucket/prefix`), so that runs on different
machines (Kubernetes or ECS run workers) find each other's files. Writers append record batches
as they go and readers stream them, so memory stays bounded as a corpus grows. A file appears
under its final name only once complete: writers write `<name>.tmp` and then move it.

Stage functions take a `StagePath`, or a plain local `Path` (tests and scripts).
"""

import json
import posixpath
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

WRITE_BATCH_ROWS = 512
MAX_ROW_GROUP_ROWS = 16384  # what a reader holds at once
SUMMARY_KEY = "batch_pipeline.summary"  # a stage file's footer: what the stage did
STAGE_SECONDS = "stage_seconds"  # in every footer: how long the stage that wrote it took

# LanceDB's storage option names (what users already write for LanceDB) -> pyarrow's S3 names
_S3_OPTION_NAMES = {
    "aws_access_key_id": "access_key",
    "access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "session_token": "session_token",
    "aws_region": "region",
    "region": "region",
    "aws_endpoint": "endpoint",
    "endpoint": "endpoint",
    "aws_endpoint_url": "endpoint",
    "endpoint_url": "endpoint",
}


def filesystem_for(uri: str, storage_options: dict[str, str] | None = None) -> tuple:
    """(pyarrow filesystem, path in it) for a local path, `file://`, `s3://` or other URI.

    For `s3://` the object-store options are LanceDB's (`aws_endpoint`, `aws_region`,
    `aws_access_key_id`, ...), so one set of options serves the index and staging; without
    them the usual AWS credential chain and environment apply.
    """
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # 1 letter: a Windows drive
        local = parsed.path if parsed.scheme == "file" else uri
        return pafs.LocalFileSystem(), str(Path(local).expanduser().resolve())
    if parsed.scheme in ("s3", "s3a"):
        kwargs: dict[str, object] = {}
        for key, value in (storage_options or {}).items():
            name = _S3_OPTION_NAMES.get(key.lower())
            if name is None:
                continue  # a LanceDB-only option (allow_http, timeouts, ...)
            if name == "endpoint":
                endpoint = urlparse(value if "://" in value else f"https://{value}")
                kwargs["endpoint_override"] = endpoint.netloc
                kwargs["scheme"] = endpoint.scheme
            else:
                kwargs[name] = value
        path = f"{parsed.netloc}{parsed.path}".rstrip("/")
        return pafs.S3FileSystem(**kwargs), path
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, path.rstrip("/")


@dataclass(frozen=True)
class StagePath:
    """A file or folder on the staging filesystem, shown to users as `uri`."""

    filesystem: pafs.FileSystem
    path: str
    uri: str

    def __truediv__(self, name: str) -> "StagePath":
        return StagePath(
            self.filesystem, posixpath.join(self.path, name), f"{self.uri.rstrip('/')}/{name}"
        )

    def __str__(self) -> str:
        return self.uri

    def __fspath__(self) -> str:
        """Local staging only: lets `open()`, pyarrow and pathlib take a StagePath."""
        if self.local_path is None:
            raise TypeError(f"{self.uri} is in an object store, not a local path")
        return self.path

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def local_path(self) -> Path | None:
        """The local path, when staging is a local folder."""
        return Path(self.path) if isinstance(self.filesystem, pafs.LocalFileSystem) else None

    def is_file(self) -> bool:
        return self.filesystem.get_file_info(self.path).type == pafs.FileType.File

    def files(self, recursive: bool = False) -> list[pafs.FileInfo]:
        """The files under this folder (none if it does not exist)."""
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=recursive)
        infos = self.filesystem.get_file_info(selector)
        return [i for i in infos if i.type == pafs.FileType.File]

    def child(self, info: pafs.FileInfo) -> "StagePath":
        """The StagePath of a FileInfo listed under this folder."""
        relative = posixpath.relpath(info.path, self.path)
        return self / relative

    def make_dirs(self) -> None:
        if self.local_path is not None:
            self.local_path.mkdir(parents=True, exist_ok=True)
        else:
            self.filesystem.create_dir(self.path, recursive=True)

    def delete(self) -> None:
        """Remove this file or folder; nothing happens if it is not there (any more)."""
        kind = self.filesystem.get_file_info(self.path).type
        try:
            if kind == pafs.FileType.File:
                self.filesystem.delete_file(self.path)
            elif kind == pafs.FileType.Directory:
                self.filesystem.delete_dir(self.path)
        except FileNotFoundError:
            pass  # removed meanwhile by another run

    @contextmanager
    def atomic_output(self) -> Iterator[pa.NativeFile]:
        """A stream whose file appears at this path whole, or not at all.

        It is written under a temporary name and then moved into place: a rename locally,
        copy-and-delete on S3. An error while writing removes the temporary file.
        """
        if self.local_path is not None:
            self.local_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = StagePath(self.filesystem, self.path + ".tmp", self.uri + ".tmp")
        stream = self.filesystem.open_output_stream(tmp.path, compression=None)
        try:
            yield stream
        except BaseException:
            stream.close()
            tmp.delete()
            raise
        stream.close()
        self.filesystem.move(tmp.path, self.path)

    def write_bytes(self, data: bytes) -> None:
        """Write a small file atomically."""
        with self.atomic_output() as stream:
            stream.write(data)

    def read_bytes(self) -> bytes:
        with self.filesystem.open_input_stream(self.path, compression=None) as stream:
            return stream.read()

    def write_table(self, table: pa.Table) -> None:
        """Write one Parquet file atomically (a temporary name, then a move)."""
        with StageWriter(self, table.schema) as writer:
            writer.write_table(table)


def as_stage_path(location: "StagePath | Path | str") -> StagePath:
    if isinstance(location, StagePath):
        return location
    filesystem, path = filesystem_for(str(location))
    return StagePath(filesystem, path, str(location))


class StagingArea:
    """Where one deployment keeps its stage files: a local folder or an object store prefix."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        filesystem, path = filesystem_for(uri, self.storage_options)
        shown = path if isinstance(filesystem, pafs.LocalFileSystem) else uri.rstrip("/")
        self.root = StagePath(filesystem, path, shown)

    def stage_file(self, partition: str, run_id: str, stage: str) -> StagePath:
        folder = self.root / partition / run_id
        folder.make_dirs()
        return folder / f"{stage}.parquet"

    def checkpoint_dir(self, partition: str, fingerprint: str) -> StagePath:
        return self.root / partition / "checkpoints" / fingerprint

    def sensor_state(self, collection: str) -> StagePath:
        """Where a collection's publish sensor keeps listing states too big for its cursor."""
        return self.root / "sensor-state" / collection

    def locate(self, uri: str) -> StagePath:
        """The StagePath of a URI this area handed out (as recorded in `dagster/uri`)."""
        root = self.root.uri.rstrip("/")
        if not uri.startswith(root + "/"):
            raise ValueError(f"{uri} is not under the staging location {root}")
        return self.root / uri[len(root) + 1 :]

    def prune_runs(
        self,
        partition: str,
        keep: set[str],
        keep_latest: int,
        finished: Callable[[str], bool] = lambda run: True,
        unfinished_grace_seconds: float = 0.0,
    ) -> int:
        """Delete the stage files of older runs, keeping `keep` and the `keep_latest` newest.

        A run that has not `finished` may still be executing, or be re-executed from its
        failure (which reads its stage files): it is kept until its newest file is older
        than `unfinished_grace_seconds`.
        """
        folder = self.root / partition
        newest: dict[str, float] = {}
        for info in folder.files(recursive=True):
            run = posixpath.relpath(info.path, folder.path).split("/", 1)[0]
            stamp = info.mtime.timestamp() if info.mtime else 0.0
            newest[run] = max(newest.get(run, 0.0), stamp)
        runs = sorted(newest, key=newest.__getitem__)
        horizon = time.time() - unfinished_grace_seconds
        removed = 0
        for run in runs[: max(0, len(runs) - keep_latest)]:
            if run in keep or (newest[run] > horizon and not finished(run)):
                continue
            (folder / run).delete()
            removed += 1
        return removed


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet leaf paths of every column but floating-point ones, the columns a stage
    file dictionary-encodes. A vector's values almost never repeat, so its dictionary is given
    up after a page anyway, and trying made writing 1,013 vectors 7x slower (28 ms, not 4)."""
    paths: list[str] = []

    def leaves(path: str, kind: pa.DataType) -> None:
        if (
            pa.types.is_list(kind)
            or pa.types.is_large_list(kind)
            or pa.types.is_fixed_size_list(kind)
        ):
            leaves(f"{path}.list.element", kind.value_type)
        elif pa.types.is_struct(kind):
            for field in kind:
                leaves(f"{path}.{field.name}", field.type)
        elif not pa.types.is_floating(kind):
            paths.append(path)

    for field in schema:
        leaves(field.name, field.type)
    return paths


class StageWriter:
    """Buffers rows and writes them to Parquet in record batches; always writes a file.

    Readers only ever see a complete file (`StagePath.atomic_output`). A `summary` set before
    the file is closed (what the stage did, known only at its end) goes into the file's
    footer, where the next stage reads it with `stage_summary`.
    """

    def __init__(
        self, path: "StagePath | Path", schema: pa.Schema, started: float | None = None
    ) -> None:
        self.path = as_stage_path(path)
        self.schema = schema
        self.rows = 0
        self.summary: dict[str, object] | None = None
        # when the stage began (time.perf_counter()): its seconds go into the footer
        self.started = time.perf_counter() if started is None else started
        self._buffer: list[dict] = []
        self._output = ExitStack()
        self._writer = pq.ParquetWriter(
            self._output.enter_context(self.path.atomic_output()),
            schema,
            use_dictionary=dictionary_columns(schema),
        )

    def write(self, row: dict) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= WRITE_BATCH_ROWS:
            self.flush()

    def write_table(self, table: pa.Table) -> None:
        self.flush()
        self._writer.write_table(table.cast(self.schema), row_group_size=MAX_ROW_GROUP_ROWS)
        self.rows += table.num_rows

    def flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_pylist(self._buffer, schema=self.schema))
            self.rows += len(self._buffer)
            self._buffer = []

    def close(self) -> None:
        self.flush()
        summary = {**(self.summary or {}), STAGE_SECONDS: time.perf_counter() - self.started}
        self._writer.add_key_value_metadata({SUMMARY_KEY: json.dumps(summary)})
        self._writer.close()
        self._output.close()

    def __enter__(self) -> "StageWriter":
        return self

    def __exit__(self, *exc_info) -> None:  # noqa: ANN002
        if exc_info[0] is None:
            self.close()
        else:
            self._writer.close()
            self._output.__exit__(*exc_info)  # removes the unfinished file


class StageFileError(RuntimeError):
    """A stage file this version cannot read: written by an earlier one, with other columns."""


def parquet_file(path: "StagePath | Path", columns: list[str] | None = None) -> pq.ParquetFile:
    """The stage file, checked to hold `columns`. A file from before an upgrade (a Dagster
    re-execution from failure hands a new version its parent run's files) fails with a
    StageFileError that says what to do, not with Arrow's missing-field error."""
    location = as_stage_path(path)
    file = pq.ParquetFile(location.filesystem.open_input_file(location.path))
    missing = [c for c in columns or [] if c not in file.schema_arrow.names]
    if missing:
        raise StageFileError(
            f"{location} has no column {', '.join(map(repr, missing))}: an earlier version of "
            "batch-pipeline wrote it. Start a new run of the partition (not a re-execution "
            "from failure); it re-collects and loses nothing."
        )
    return file


def read_batches(
    path: "StagePath | Path", columns: list[str] | None = None, batch_rows: int = 2048
) -> Iterator[pa.RecordBatch]:
    """Record batches of at most `batch_rows` rows, in file order, a few row groups at a time.

    (One `iter_batches` over the whole file keeps what it read until it is done, so its
    memory grows with the file; reading runs of row groups of about `batch_rows` rows keeps
    it flat. Writers cap row groups at `MAX_ROW_GROUP_ROWS`.)
    """
    file = parquet_file(path, columns)
    metadata = file.metadata
    run: list[int] = []
    rows = 0
    for group in range(file.num_row_groups):
        run.append(group)
        rows += metadata.row_group(group).num_rows
        if rows >= batch_rows or group == file.num_row_groups - 1:
            table = file.read_row_groups(run, columns=columns).combine_chunks()
            yield from table.to_batches(max_chunksize=batch_rows)
            run, rows = [], 0


def read_groups(
    path: "StagePath | Path", group_column: str, columns: list[str]
) -> Iterator[list[tuple]]:
    """The rows' `columns` as tuples, a list per run of rows with the same `group_column` (a
    plan's batch or chunk index), streamed in file order."""
    group: list[tuple] = []
    current = None
    for record_batch in read_batches(path, [group_column, *columns]):
        values = record_batch.to_pydict()
        for index, *row in zip(*(values[c] for c in [group_column, *columns]), strict=True):
            if index != current and group:
                yield group
                group = []
            current = index
            group.append(tuple(row))
    if group:
        yield group


def read_table(path: "StagePath | Path", columns: list[str] | None = None) -> pa.Table:
    return parquet_file(path, columns).read(columns=columns)


def row_count(path: "StagePath | Path") -> int:
    return parquet_file(path).metadata.num_rows


def schema_metadata(path: "StagePath | Path") -> dict[bytes, bytes]:
    return parquet_file(path).schema_arrow.metadata or {}


def stage_summary(path: "StagePath | Path") -> dict[str, object]:
    """The summary a stage wrote into its file's footer ({} if it wrote none)."""
    recorded = (parquet_file(path).metadata.metadata or {}).get(SUMMARY_KEY.encode())
    return json.loads(recorded) if recorded else {}


def is_full_pass(collected_path: "StagePath | Path") -> bool:
    """Whether a collect output covers the whole source (not a targeted run)."""
    return schema_metadata(collected_path).get(b"mode") == b"full"


def stamped_collect_schema(schema: pa.Schema, full: bool = True) -> pa.Schema:
    """A collect file's schema stamped with when collection started (now) and whether it
    covers the whole source: land never overwrites what another run landed after this."""
    mode = b"full" if full else b"targeted"
    return schema.with_metadata({b"mode": mode, b"collected_at": str(time.time()).encode()})


def collected_at(collected_path: "StagePath | Path") -> float:
    """When the collect that wrote this file started (0 for files that do not say)."""
    return float(schema_metadata(collected_path).get(b"collected_at") or 0)
