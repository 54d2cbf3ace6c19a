"""A run's record, typed: what it landed into, what it counted, and its measures.

Every product records its runs the same way (`TrackingStore.record_run`). What a run counted
is the product's own (`counts`, named in its nouns: `documents_landed` and `chunks_embedded`
for the vector index, `tickets_read` and `tickets_classified` for the ticket intents); the
measures (`RunMeasures`) name the unit their attempted, failed and quarantined inputs are in.
"""

import json
import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.measures.run import DOCUMENTS, RunMeasures
from batch_pipeline.names import generation_index
from batch_pipeline.state.tracking.schema import (
    runs,
)

# The columns older versions read a run's counts from, and the count each one mirrors. A run
# in documents fills them from its counts; a run in any other unit writes 0 there (they are
# NOT NULL in databases older versions created), and readers take its `counts` instead.
LEGACY_COUNT_COLUMNS: dict[str, str] = {
    "docs_landed": "documents_landed",
    "docs_deleted": "documents_deleted",
    "chunks_embedded": "chunks_embedded",
    "chunks_reused": "chunks_reused",
    "chunks_removed": "chunks_removed",
    "chunks_resumed": "chunks_resumed",
    "chunks_superseded": "chunks_superseded",
}


@dataclass(frozen=True)
class RunRecord:
    """One landed run of one generation."""

    run_id: str
    index: str  # the generation it landed into
    model_name: str
    fingerprint: str  # the generation's fingerprint
    measures: RunMeasures
    counts: dict[str, int] = field(default_factory=dict)  # the product's own, by name
    table_version: int | None = None
    table_version_before: int | None = None
    deletions_held: int = 0

    def columns(self) -> dict[str, Any]:
        """The run's row of `schema.runs`, by column key (without run id and generation)."""
        documents = self.measures.unit == DOCUMENTS
        return {
            "model_name": self.model_name,
            "fingerprint": self.fingerprint,
            "table_version": self.table_version,
            "table_version_before": self.table_version_before,
            "deletions_held": self.deletions_held,
            "counts": json.dumps(self.counts, sort_keys=True),
            **{
                column: int(self.counts.get(count, 0)) if documents else 0
                for column, count in LEGACY_COUNT_COLUMNS.items()
            },
            **self.measures.record(),
        }


def run_counts(row: dict[str, Any]) -> dict[str, int]:
    """What a stored run counted: its `counts`, or for a run recorded before them, the
    document and chunk columns it filled."""
    if row.get("counts"):
        return json.loads(row["counts"])
    return {
        count: int(row[column] or 0)
        for column, count in LEGACY_COUNT_COLUMNS.items()
        if row.get(column) is not None
    }


LANDING, LANDED = "landing", "landed"


def _landed(state: sa.ColumnElement) -> sa.ColumnElement:
    return sa.or_(state.is_(None), state == LANDED)


_RUN_KEYS = {column.name: column.key for column in runs.columns}


def _run_row(row: sa.Row) -> dict[str, Any]:
    """A runs row for readers, by column key (`generation`, `attempted`, ...), with what the
    run counted parsed (`counts`)."""
    values = {_RUN_KEYS[name]: value for name, value in row._mapping.items()}
    return {**values, "counts": run_counts(dict(row._mapping))}


class RunRecords:
    """Reads and writes the `runs` table. Mixed into TrackingStore."""

    engine: Engine

    def record_run_started(self, run_id: str, index: str, **values: Any) -> None:
        """Note that a run is about to commit into generation `index` (before its first
        commit), so every run id that can appear in a table is known even if the run dies.
        A retried run keeps its first record: its `table_version_before` is the true one."""
        with self.engine.begin() as conn:
            known = conn.execute(
                sa.select(runs.c.run_id).where(runs.c.run_id == run_id, runs.c.generation == index)
            ).first()
            if known is None:
                conn.execute(
                    runs.insert().values(
                        run_id=run_id,
                        generation=index,
                        finished_at=time.time(),
                        state=LANDING,
                        docs_landed=0,
                        docs_deleted=0,
                        failed=0,
                        chunks_embedded=0,
                        chunks_reused=0,
                        chunks_removed=0,
                        **values,
                    )
                )

    def record_run(self, record: RunRecord) -> None:
        """A run's record once it has landed (replacing its `landing` record)."""
        run_id, index = record.run_id, record.index
        key = (runs.c.run_id == run_id, runs.c.generation == index)
        values = {"finished_at": time.time(), **record.columns()}
        with self.engine.begin() as conn:
            started = conn.execute(sa.select(runs.c.table_version_before).where(*key)).first()
            if started is not None and started.table_version_before is not None:
                values["table_version_before"] = started.table_version_before
            conn.execute(runs.delete().where(*key))
            conn.execute(
                runs.insert().values(
                    run_id=run_id,
                    generation=index,
                    state=LANDED,
                    **values,
                )
            )

    def run_started(self, run_id: str, index: str) -> float | None:
        """When a run of generation `index` started, as its record says (None: no record)."""
        query = sa.select(runs.c.started_at).where(
            runs.c.run_id == run_id, runs.c.generation == index
        )
        with self.engine.connect() as conn:
            return conn.execute(query).scalar()

    def merge_submitting_run(self, submitted_by: str, index: str) -> None:
        """The provider batches `submitted_by` handed over were landed by another run, whose
        record is the one run's: the submitting run's own record goes when it attempted
        nothing (one that landed, failed or deleted anything keeps its record)."""
        with self.engine.begin() as conn:
            conn.execute(
                runs.delete().where(
                    runs.c.run_id == submitted_by,
                    runs.c.generation == index,
                    runs.c.attempted == 0,  # it landed, failed and deleted nothing
                )
            )

    def run_finished(self, index: str, run_id: str) -> bool:
        """Whether this run finished landing into generation `index`."""
        query = sa.select(runs.c.run_id).where(
            runs.c.generation == index, runs.c.run_id == run_id, _landed(runs.c.state)
        )
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def runs_with_id(self, run_id: str) -> list[dict[str, Any]]:
        """What a run landed, one record per generation it landed into."""
        query = sa.select(runs).where(runs.c.run_id == run_id).order_by(runs.c.generation)
        with self.engine.connect() as conn:
            return [_run_row(row) for row in conn.execute(query)]

    def partition_runs(
        self,
        partitions: list[str],
        limit: int,
        index: str | None = None,
        product: str | None = None,
    ) -> list[dict[str, Any]]:
        """The newest `limit` landed runs of these partitions that recorded their measures,
        newest first; only those that landed into generation `index`, or into any generation
        of `product`, when given (products share partition keys: a collection's index and
        its briefs)."""
        query = sa.select(runs).where(runs.c.partition.in_(partitions), _landed(runs.c.state))
        if index is not None:
            query = query.where(runs.c.generation == index)
        if product is not None:
            prefix = generation_index(product, "")
            query = query.where(runs.c.generation.startswith(prefix, autoescape=True))
        query = query.order_by(runs.c.finished_at.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [_run_row(row) for row in conn.execute(query)]

    def last_run(self, index: str) -> dict[str, Any] | None:
        query = (
            sa.select(runs)
            .where(runs.c.generation == index, _landed(runs.c.state))
            .order_by(runs.c.finished_at.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return _run_row(row) if row else None
