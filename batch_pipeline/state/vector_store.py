"""The LanceDB index: one table per generation (a collection and model fingerprint), one row
per chunk, with its lineage.

All writes go through `replace_documents()`: a single `merge_insert` commit that upserts the
documents' new chunks and deletes their stale chunks (and all chunks of deleted documents), so
a reader never sees half a document. Every value in a filter string goes through `sql_literal`.
"""

import re
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from batch_pipeline.iterables import batched
from batch_pipeline.transient import is_commit_conflict

COMMIT_RETRIES = 6  # optimistic-commit conflicts with a concurrent writer are retried


def sql_literal(value: str) -> str:
    """A string as a quoted SQL literal for a LanceDB filter: quotes doubled, NUL refused."""
    if "\x00" in value:
        raise ValueError("NUL characters cannot be used in a filter value")
    return "'" + value.replace("'", "''") + "'"


def in_filter(column: str, values: Iterable[str]) -> str:
    return f"{column} IN ({', '.join(sql_literal(v) for v in values)})"


def commit_with_retries(table: Any, commit: Callable[[], object]) -> None:
    """Run one commit on `table`, retrying it (on the latest version) while it conflicts with
    a concurrent writer's; any other error is raised at once."""
    for attempt in range(COMMIT_RETRIES):
        try:
            commit()
            return
        except Exception as error:  # noqa: BLE001 - only commit conflicts are retried
            if attempt == COMMIT_RETRIES - 1 or not is_commit_conflict(error):
                raise
            time.sleep(0.2 * 2**attempt)
            table.checkout_latest()


METADATA_TYPES = {
    "string": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
}


# A chunk row's lineage: where its vector came from. A fresh vector gets this run's; an
# unchanged chunk keeps its landed row's.
LINEAGE_COLUMNS = ("vector", "model_name", "model_fingerprint", "run_id", "embedded_at")


def chunk_schema(dim: int, fields: dict[str, str] | None = None) -> pa.Schema:
    """A generation's table: one row per chunk with its lineage, then the declared metadata
    fields (typed) and the rest of the document's metadata as JSON."""
    return pa.schema(
        [
            pa.field("collection", pa.string(), nullable=False),
            pa.field("partition", pa.string(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("chunk_index", pa.int32(), nullable=False),
            pa.field("title", pa.string()),
            pa.field("section", pa.string()),
            pa.field("text", pa.string(), nullable=False),
            pa.field("input_text", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("model_name", pa.string(), nullable=False),
            pa.field("model_fingerprint", pa.string(), nullable=False),
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("embedded_at", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("source_version", pa.string(), nullable=False),
            pa.field("content_hash", pa.string(), nullable=False),
            *(pa.field(name, METADATA_TYPES[kind]) for name, kind in (fields or {}).items()),
            pa.field("metadata", pa.string()),
        ]
    )


@dataclass(frozen=True)
class TableStats:
    rows: int
    documents: int
    version: int
    oldest_embedded_at: Any
    newest_embedded_at: Any
    models: list[str]
    run_ids: int


_MISSING_FILE = re.compile(r"Not found: (?:Wrapped error: Not found: )?(\S+?\.lance/data/[^,\s]+)")


def missing_data_file(error: BaseException) -> str | None:
    """The data file a LanceDB read found missing (a lost or deleted fragment), or None for
    any other error."""
    text = str(error)
    if "lance error" not in text.lower() or "Not found" not in text:
        return None
    found = _MISSING_FILE.search(text)
    return found.group(1) if found else "a data file"


class TableDamagedError(RuntimeError):
    """A generation's table refers to data files that are gone; the message says what to do."""

    def __init__(self, missing: str) -> None:
        table = re.search(r"([^/]+)\.lance/data/", missing)
        name = table.group(1) if table else "a table"
        super().__init__(
            f"the table {name} is damaged: its data file {missing} is missing (lost or "
            "deleted); `batch-pipeline doctor` says which version is whole, and `batch-pipeline "
            "repair` restores it"
        )
        self.table = name


class VectorStore:
    """A LanceDB database holding one chunk table per generation (`<collection>__<fingerprint>`)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.db = lancedb.connect(uri, storage_options=storage_options)

    def table_uri(self, index: str) -> str:
        return f"{self.uri.rstrip('/')}/{index}.lance"

    def has_table(self, index: str) -> bool:
        return index in self.db.list_tables().tables

    def open(self, index: str):
        """The generation's table, or None if it has none. A table another run is creating
        is listed (its folder is there) before its first version is committed, and LanceDB
        cannot open it until then ("was not found"): it holds no rows yet, so it is None too.
        Seen with four shards landing into one table on S3, where one shard's prepare looked
        while another shard's land created the table."""
        if not self.has_table(index):
            return None
        try:
            return self.db.open_table(index)
        except ValueError as error:
            if "was not found" in str(error):
                return None
            raise

    def drop_table(self, index: str) -> bool:
        """Drop a generation's table; False if there was none."""
        if not self.has_table(index):
            return False
        self.db.drop_table(index)
        return True

    def create_table(self, index: str, schema: pa.Schema):
        """The generation's table, created empty with `schema` if it does not exist yet."""
        return self.db.create_table(index, schema=schema, exist_ok=True)

    def ensure_table(self, index: str, dim: int, fields: dict[str, str] | None = None):
        """The generation's table, created if missing; columns added since it was created
        (metadata fields declared later) are added, empty, to it."""
        schema = chunk_schema(dim, fields)
        table = self.open(index)
        if table is None:
            return self.create_table(index, schema)
        have = {f.name: f for f in table.schema}
        missing = [f for f in schema if f.name not in have]
        for wanted in schema:
            present = have.get(wanted.name)
            if present is not None and present.type != wanted.type:
                raise ValueError(
                    f"metadata.fields.{wanted.name}: the table {index} holds it as "
                    f"{present.type}, not {wanted.type}; keep the type or rename the field"
                )
        if missing:
            commit_with_retries(table, lambda: table.add_columns(pa.schema(missing)))
        return table

    def scan(self, index: str, columns: list[str], where: str | None = None) -> pa.Table:
        """These columns of the rows matching `where` (all rows without it)."""
        table = self.open(index)
        if table is None:
            return pa.table({c: pa.array([], pa.string()) for c in columns})
        query = table.search()
        if where is not None:
            query = query.where(where)
        return query.select(columns).limit(None).to_arrow()

    def scan_batches(
        self, index: str, columns: list[str], batch_rows: int = 8192
    ) -> Iterator[pa.RecordBatch]:
        """These columns of every row, streamed in record batches (none if no table)."""
        table = self.open(index)
        if table is None:
            return
        yield from table.search().select(columns).limit(None).to_batches(batch_rows)

    def count_rows(self, index: str, where: str | None = None) -> int:
        """The table's rows, or those matching `where` (a filter with escaped literals)."""
        table = self.open(index)
        return table.count_rows(where) if table is not None else 0

    def chunk_keys(self, index: str, doc_ids: list[str]) -> dict[str, tuple[str, str, str]]:
        """chunk_id -> (doc_id, input_hash, model_fingerprint) for these documents' rows."""
        keys: dict[str, tuple[str, str, str]] = {}
        for batch in batched(doc_ids):
            rows = self.scan(
                index,
                ["chunk_id", "doc_id", "input_hash", "model_fingerprint"],
                in_filter("doc_id", batch),
            ).to_pylist()
            for row in rows:
                keys[row["chunk_id"]] = (row["doc_id"], row["input_hash"], row["model_fingerprint"])
        return keys

    def fetch_chunks(self, index: str, chunk_ids: list[str]) -> pa.Table:
        """Full rows for these chunk ids (to carry unchanged vectors over)."""
        table = self.open(index)
        if table is None or not chunk_ids:
            return pa.Table.from_pylist([], schema=table.schema if table else None)
        parts = [
            table.search().where(in_filter("chunk_id", batch)).limit(None).to_arrow()
            for batch in batched(chunk_ids)
        ]
        return pa.concat_tables(parts)

    def replace_documents(
        self,
        index: str,
        rows: list[dict],
        doc_ids: list[str],
        dim: int,
        replaces_nothing: bool = False,
        fields: dict[str, str] | None = None,
    ) -> int:
        """Make `doc_ids`' rows exactly `rows`, in one commit. Returns the new table version.

        `replaces_nothing` says the caller, holding the generation's landing lease, found no
        rows of these documents: the commit is then a plain append, which costs the size of
        `rows` rather than a join against the whole table (a first build's common case).
        """
        table = self.ensure_table(index, dim, fields)
        if not doc_ids:
            return table.version
        data = pa.Table.from_pylist(rows, schema=table.schema)
        if replaces_nothing:
            if data.num_rows:
                commit_with_retries(table, lambda: table.add(data))
            return table.version
        commit_with_retries(
            table,
            lambda: (
                table.merge_insert("chunk_id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .when_not_matched_by_source_delete(in_filter("doc_id", doc_ids))
                .execute(data)
            ),
        )
        return table.version

    def maintain_if_needed(
        self, index: str, max_fragments: int, max_versions: int, retention: timedelta
    ) -> dict[str, int]:
        """Compact and clean up once small commits have piled up (not only nightly)."""
        table = self.open(index)
        if table is None:
            return {}
        if self.fragment_count(index) <= max_fragments and (
            len(table.list_versions()) <= max_versions
        ):
            return {}
        return self.maintain(index, retention)

    def maintain(self, index: str, retention: timedelta) -> dict[str, int]:
        """Compact small fragments and remove versions older than `retention`."""
        table = self.open(index)
        if table is None:
            return {}
        fragments, versions = self.fragment_count(index), len(table.list_versions())
        with warnings.catch_warnings():  # retention 0 is a deliberate setting here
            warnings.simplefilter("ignore", UserWarning)
            table.optimize(cleanup_older_than=retention)
        return {
            "fragments_before": fragments,
            "fragments_after": self.fragment_count(index),
            "versions_before": versions,
            "versions_after": len(table.list_versions()),
        }

    def fragment_count(self, index: str) -> int:
        table = self.open(index)
        return _fragments(table) if table is not None else 0

    def damage(self, index: str, at_version: int | None = None) -> str | None:
        """The data file a scan of the table (at a version) finds missing, or None when every
        fragment reads. Reads the first column of every row: a fragment lost whole (a
        deleted or never-copied file) is found; a lost file of a column added later is found
        when that column is read."""
        table = self.open(index)
        if table is None:
            return None
        if at_version is not None:
            table.checkout(at_version)
        try:
            first = table.schema.names[:1]
            for _ in table.search().select(first).limit(None).to_batches(65536):
                pass
        except (RuntimeError, OSError) as error:
            missing = missing_data_file(error)
            if missing is None:
                raise
            return missing
        return None

    def newest_whole_version(self, index: str) -> int | None:
        """The newest version of a damaged table whose every fragment reads (None: none)."""
        table = self.open(index)
        if table is None:
            return None
        for version in sorted((v["version"] for v in table.list_versions()), reverse=True):
            if self.damage(index, version) is None:
                return version
        return None

    def restore_version(self, index: str, version: int) -> int:
        """Make `version` the table's newest again (a new version); returns it."""
        table = self.open(index)
        table.restore(version)
        return table.version

    def table_health(self, index: str | None) -> dict[str, object]:
        """A table's rows, version, versions kept and fragments (`doctor`); zeros for none."""
        table = self.open(index) if index else None
        if table is None:
            return {
                "table_rows": 0,
                "table_version": None,
                "table_versions": 0,
                "table_fragments": 0,
            }
        return {
            "table_rows": table.count_rows(),
            "table_version": table.version,
            "table_versions": len(table.list_versions()),
            "table_fragments": _fragments(table),
        }

    def stats(self, index: str, batch_rows: int = 65536) -> TableStats | None:
        """Rows, documents, version and lineage range of a table, streamed in record batches.

        Memory holds one batch of four small columns plus 8 bytes per distinct document.
        """
        table = self.open(index)
        if table is None:
            return None
        rows, oldest, newest = 0, None, None
        doc_hashes: list[np.ndarray] = []
        models: set[str] = set()
        run_ids: set[str] = set()
        columns = ["doc_id", "embedded_at", "model_name", "run_id"]
        for batch in self.scan_batches(index, columns, batch_rows):
            if not batch.num_rows:
                continue
            rows += batch.num_rows
            bounds = pc.min_max(batch["embedded_at"])
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            oldest = low if oldest is None else min(oldest, low)
            newest = high if newest is None else max(newest, high)
            docs = pc.unique(batch["doc_id"]).to_pylist()
            doc_hashes.append(np.unique(np.fromiter(map(hash, docs), np.int64, len(docs))))
            models.update(pc.unique(batch["model_name"]).to_pylist())
            run_ids.update(pc.unique(batch["run_id"]).to_pylist())
            if len(doc_hashes) > 16:  # fold, so the list stays short
                doc_hashes = [np.unique(np.concatenate(doc_hashes))]
        documents = len(np.unique(np.concatenate(doc_hashes))) if doc_hashes else 0
        return TableStats(
            rows=rows,
            documents=documents,
            version=table.version,
            oldest_embedded_at=oldest,
            newest_embedded_at=newest,
            models=sorted(models),
            run_ids=len(run_ids),
        )

    def sample(
        self, index: str, columns: list[str], size: int, seed: int | None = None
    ) -> pa.Table:
        """A uniform random sample of `size` rows (fewer if the table is smaller), read by
        row offset: nothing else of the table is read."""
        total = self.count_rows(index)
        if total == 0 or size < 1:
            return pa.table({c: pa.array([], pa.string()) for c in columns})
        rng = np.random.default_rng(seed)
        offsets = sorted(int(i) for i in rng.choice(total, size=min(size, total), replace=False))
        return self.open(index).take_offsets(offsets).select(columns).to_arrow()


def _fragments(table) -> int:  # noqa: ANN001
    """How many data fragments a LanceDB table has (compaction merges them)."""
    return int(table.stats()["fragment_stats"]["num_fragments"])
