"""The briefs: one LanceDB table per generation, one row per document.

A row holds the brief's fields as typed columns (one per property of the output schema), the
raw output and its finish reason, prompt and output tokens, whether the document was cut to
fit the prompt, and its lineage: the document's content hash, the staleness key
(`input_hash`), the prompt and schema versions, the model, the run and when it was generated.

A run's rows land in `merge_insert` commits keyed by `doc_id`, the last of which also deletes
the briefs of deleted documents, so a reader sees each brief whole, before or after.
"""

import heapq
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from batch_pipeline.config.output_schema import OutputSchema
from batch_pipeline.iterables import batched
from batch_pipeline.state.spill import BucketSpill, hash_buckets
from batch_pipeline.state.vector_store import VectorStore, commit_with_retries, in_filter

# a document's staleness key, as a brief table and a question table hold it
KEYS_SCHEMA = pa.schema([("doc_id", pa.string()), ("input_hash", pa.string())])

COLUMN_TYPES = {
    "string": pa.string(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "list<string>": pa.list_(pa.string()),
}


def brief_schema(output: OutputSchema) -> pa.Schema:
    """A generation's table: lineage first, then one typed column per brief field."""
    fields = [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("collection", pa.string(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("content_hash", pa.string(), nullable=False),
        pa.field("input_hash", pa.string(), nullable=False),
        pa.field("raw_output", pa.string(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("prompt_tokens", pa.int32(), nullable=False),
        pa.field("output_tokens", pa.int32(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
        pa.field("control_tokens", pa.int32(), nullable=False),
        pa.field("prompt_version", pa.string(), nullable=False),
        pa.field("schema_version", pa.string(), nullable=False),
        pa.field("model_name", pa.string(), nullable=False),
        pa.field("model_fingerprint", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("generated_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
    fields += [pa.field(name, COLUMN_TYPES[kind]) for name, kind in output.columns.items()]
    return pa.schema(fields)


def spilled_keys(batches: Iterable[pa.RecordBatch], buckets: int, directory: Path) -> BucketSpill:
    """(doc_id, input_hash) batches spilled under `directory` into `buckets` by doc id, so a
    bucket meets the same bucket of another spill by doc id; closed, ready to read."""
    spill = BucketSpill(directory, "keys", KEYS_SCHEMA)
    for batch in batches:
        spill.add(batch, hash_buckets(batch["doc_id"].to_pylist(), buckets))
    spill.close()
    return spill


def key_map(keys: pa.Table) -> dict[str, str]:
    """doc_id -> input_hash of a bucket of `spilled_keys` (one key per document)."""
    return dict(zip(*(keys[name].to_pylist() for name in KEYS_SCHEMA.names), strict=True))


def brief_fields(raw_output: str, output: OutputSchema) -> dict[str, object]:
    """The typed columns of a valid output (missing optional fields are null)."""
    value = json.loads(raw_output)
    return {name: value.get(name) for name in output.columns}


class BriefStore:
    """Reads and writes the brief generations' tables in the pipeline's LanceDB database."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def count(self, index: str) -> int:
        """How many briefs the generation holds (0 before its table exists)."""
        return self.store.count_rows(index)

    def key_batches(self, index: str) -> Iterator[pa.RecordBatch]:
        """(doc_id, input_hash: the staleness key its brief was generated under), streamed
        in record batches; none before the table exists."""
        return self.store.scan_batches(index, KEYS_SCHEMA.names)

    def doc_ids(self, index: str) -> Iterator[str]:
        """The briefed documents' ids, streamed."""
        for batch in self.store.scan_batches(index, ["doc_id"]):
            yield from batch["doc_id"].to_pylist()

    def first_rows(self, index: str, limit: int) -> list[dict]:
        """The `limit` briefs with the smallest doc ids, by doc id. Only doc ids are streamed
        to find them, so memory grows with `limit`, not with the generation."""
        return self.rows(index, heapq.nsmallest(limit, self.doc_ids(index))) if limit else []

    def rows(self, index: str, doc_ids: list[str] | None = None) -> list[dict]:
        """The briefs (of `doc_ids`; all without them, held in memory at once), by doc id."""
        if not self.store.has_table(index):
            return []
        table = self.store.open(index)
        if doc_ids is None:
            found = table.search().limit(None).to_arrow().to_pylist()
        else:  # `ID_BATCH` ids per filter, as every `IN (...)` here
            found = [
                row
                for batch in batched(doc_ids)
                for row in table.search()
                .where(in_filter("doc_id", batch))
                .limit(None)
                .to_arrow()
                .to_pylist()
            ]
        return sorted(found, key=lambda r: r["doc_id"])

    def replace(
        self, index: str, rows: pa.Table, deleted: Iterable[str], output: OutputSchema
    ) -> int:
        """Upsert `rows` and delete the briefs of `deleted`, in one commit; the table version."""
        table = self.store.open(index)
        if table is None:
            table = self.store.create_table(index, brief_schema(output))
        gone = sorted(set(deleted))
        if not rows.num_rows and not gone:
            return table.version
        data = rows.cast(table.schema)
        merge = table.merge_insert("doc_id").when_matched_update_all().when_not_matched_insert_all()
        if gone:
            merge = merge.when_not_matched_by_source_delete(in_filter("doc_id", gone))
        commit_with_retries(table, lambda: merge.execute(data))
        return table.version
