"""The tracking store's record of failures: each document's latest failure per generation,
its reason, and whether it is quarantined. Mixed into `TrackingStore`."""

import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.iterables import batched
from batch_pipeline.names import GENERATION_SEPARATOR, generation_product
from batch_pipeline.state.tracking.schema import (
    failures,
    write_racing_inserts,
)

# Failure reasons that lie in a document's own content: retrying cannot help until the content
# changes, so such a document counts as accounted for (its generation can complete and go
# live). Any other reason (an unreadable object, a vector that could not be computed) is
# transient: the document stays pending and is retried.
CONTENT_FAILURE_REASONS = frozenset(
    {
        "empty",
        "binary",
        "invalid_utf8",
        "whitespace_only",
        "too_large",
        "invalid_doc_id",
        "no_text",
        "chunking_failed",
    }
)


# Failure reasons that say nothing about the document: a connection error, a timeout or a 5xx
# reading it (`unreachable`), or a folder above it that could not be listed (`unlistable`,
# recorded against the folder). Retried on every run, never quarantined.
UNREACHABLE, UNLISTABLE = "unreachable", "unlistable"
TRANSIENT_FAILURE_REASONS = frozenset({UNREACHABLE, UNLISTABLE})
# A document the source would not hand over: no answer, or a refusal to read it.
UNREAD_FAILURE_REASONS = frozenset({UNREACHABLE, "unreadable"})


def is_quarantined(failure: dict[str, Any], quarantine_after_failures: int) -> bool:
    """Whether a failing document has failed too often to be read again until its content
    changes. A transient failure never quarantines it."""
    return (
        failure["reason"] not in TRANSIENT_FAILURE_REASONS
        and failure["attempts"] >= quarantine_after_failures
    )


@dataclass(frozen=True)
class FailureRecord:
    doc_id: str
    stage: str
    reason: str
    error_class: str
    message: str
    content_hash: str | None = None
    source_version: str | None = None


def _failure_row(row: sa.Row) -> dict[str, Any]:
    """A failures row for readers: its collection and its generation, each by name."""
    values = dict(row._mapping)
    index = values.pop("collection")
    return {"collection": generation_product(index), "generation": index, **values}


class FailureRecords:
    """Reads and writes the `failures` table. Mixed into TrackingStore."""

    engine: Engine

    def record_failures(self, index: str, records: list[FailureRecord], run_id: str) -> None:
        """Record (or count again) each document's failure with its reason."""
        if not records:
            return
        now = time.time()

        def upsert(conn: sa.Connection) -> None:
            for record in records:
                values = {
                    "stage": record.stage,
                    "reason": record.reason,
                    "error_class": record.error_class,
                    "message": record.message[:4000],
                    "content_hash": record.content_hash,
                    "source_version": record.source_version,
                    "run_id": run_id,
                    "failed_at": now,
                }
                counted = conn.execute(
                    failures.update()
                    .where(failures.c.generation == index, failures.c.doc_id == record.doc_id)
                    .values(attempts=failures.c.attempts + 1, **values)
                )
                if counted.rowcount == 0:
                    conn.execute(
                        failures.insert().values(
                            generation=index, doc_id=record.doc_id, attempts=1, **values
                        )
                    )

        write_racing_inserts(self.engine, upsert)

    def replace_failures(
        self, index: str, prefix: str, records: list[FailureRecord], run_id: str
    ) -> None:
        """Make the failures of documents whose id starts with `prefix` exactly `records`
        (one day's tickets, say, when the day lands again: fixed rows stop counting)."""
        with self.engine.begin() as conn:
            conn.execute(
                failures.delete().where(
                    failures.c.generation == index,
                    failures.c.doc_id.startswith(prefix, autoescape=True),
                )
            )
        self.record_failures(index, records, run_id)

    def forget_failures(self, index: str, doc_ids: list[str]) -> None:
        """Drop these ids' failures (a folder that can be listed again, say)."""
        with self.engine.begin() as conn:
            for batch in batched(doc_ids, 500):
                conn.execute(
                    failures.delete().where(
                        failures.c.generation == index, failures.c.doc_id.in_(batch)
                    )
                )

    def failures_by_doc(self, index: str) -> dict[str, dict[str, Any]]:
        return {row["doc_id"]: row for row in self.list_failures(index=index)}

    def list_failures(
        self, index: str | None = None, collection: str | None = None
    ) -> list[dict[str, Any]]:
        """Failing documents of one generation, of every generation of one collection, or all.

        Each row names its `collection` and its `generation`.
        """
        query = sa.select(failures).order_by(failures.c.generation, failures.c.doc_id)
        if index is not None:
            query = query.where(failures.c.generation == index)
        if collection is not None:
            prefix = collection + GENERATION_SEPARATOR
            query = query.where(failures.c.generation.startswith(prefix, autoescape=True))
        with self.engine.connect() as conn:
            rows = [_failure_row(row) for row in conn.execute(query)]
        # a collection named like another's prefix ("a" and "a__b") is told apart here
        return [r for r in rows if collection is None or r["collection"] == collection]

    def failure_count(self, index: str, reasons: frozenset[str] | None = None) -> int:
        """Failing documents of generation `index` (for one of `reasons`, when given)."""
        query = sa.select(sa.func.count()).where(failures.c.generation == index)
        if reasons is not None:
            query = query.where(failures.c.reason.in_(sorted(reasons)))
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def failed_in_run(self, index: str, run_id: str, reasons: frozenset[str] | None = None) -> int:
        """Documents of generation `index` whose latest failure was in this run (for one of
        `reasons`, when given)."""
        query = sa.select(sa.func.count()).where(
            failures.c.generation == index, failures.c.run_id == run_id
        )
        if reasons is not None:
            query = query.where(failures.c.reason.in_(sorted(reasons)))
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
