"""The classified tickets: one LanceDB table per generation, one row per ticket.

A row holds the ticket's intent, confidence and top three, its input hash and vector, and its
lineage: the model fingerprint, the taxonomy version, the run and when it was classified. A
day's rows are replaced in one `merge_insert` commit scoped to that day, so a reader sees the
day before the run or after it, never half of it, and other days are never touched.
"""

from datetime import date

import pyarrow as pa
import pyarrow.compute as pc

from batch_pipeline.state.vector_store import (
    VectorStore,
    commit_with_retries,
    sql_literal,
)

CLASSIFIER = "classifier"  # answered_by for a ticket the classifier answered
# answered_by for a ticket whose chat model answer is still at a provider: the classifier's
# intent stands meanwhile, and the next run asks again (which collects it)
AWAITING = "awaiting"


def intent_schema(dim: int, cascade: bool = False) -> pa.Schema:
    """A ticket generation's rows; with a cascade, which model answered and at what cost."""
    escalation = [
        pa.field("head_intent", pa.string(), nullable=False),
        pa.field("answered_by", pa.string(), nullable=False),
        pa.field("answer_cost", pa.float64(), nullable=False),
    ]
    return pa.schema(
        [
            pa.field("ticket_id", pa.string(), nullable=False),
            pa.field("day", pa.string(), nullable=False),
            pa.field("channel", pa.string()),
            pa.field("intent", pa.string(), nullable=False),
            pa.field("confidence", pa.float32(), nullable=False),
            pa.field("top_intents", pa.list_(pa.string()), nullable=False),
            pa.field("top_scores", pa.list_(pa.float32()), nullable=False),
            pa.field("input_text", pa.string(), nullable=False),
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("model_fingerprint", pa.string(), nullable=False),
            pa.field("taxonomy_version", pa.string(), nullable=False),
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("classified_at", pa.timestamp("us", tz="UTC"), nullable=False),
            *(escalation if cascade else []),
        ]
    )


def day_filter(day: date | str) -> str:
    return f"day = {sql_literal(str(day))}"


class IntentStore:
    """Reads and writes the ticket generations' tables in the pipeline's LanceDB database."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def day_rows(self, index: str, day: date | str, columns: list[str] | None = None) -> pa.Table:
        """The day's rows (these columns; all without them), by ticket id."""
        table = self.store.open(index)
        if table is None:
            return pa.table({c: pa.array([], pa.string()) for c in columns or ["ticket_id"]})
        query = table.search().where(day_filter(day))
        if columns is not None:
            query = query.select(sorted({*columns, "ticket_id"}))
        rows = query.limit(None).to_arrow().sort_by("ticket_id")
        return rows if columns is None else rows.select(columns)

    def days(self, index: str) -> list[str]:
        """The days this generation holds rows for, oldest first."""
        days = self.store.scan(index, ["day"])["day"]
        return sorted(pc.unique(days).to_pylist()) if len(days) else []

    def replace_day(self, index: str, day: date | str, rows: pa.Table) -> int:
        """Make the day's rows exactly `rows` (of `intent_schema`), in one commit; returns the
        table version."""
        table = self.store.open(index)
        if table is None:
            table = self.store.create_table(index, rows.schema)
        data = rows.cast(table.schema)
        commit_with_retries(
            table,
            lambda: (
                table.merge_insert(["day", "ticket_id"])
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .when_not_matched_by_source_delete(day_filter(day))
                .execute(data)
            ),
        )
        return table.version
