"""The tracking store: what has landed, what failed, each run's summary, and generations.

SQLAlchemy Core over any URL: SQLite under the pipeline home by default, PostgreSQL in
production. Every value is a bound parameter, never formatted into SQL. Documents, pending
changes, failures and runs are kept per generation (`index`, `<collection>__<fingerprint>`).
"""

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from batch_pipeline.config import masked_url
from batch_pipeline.iterables import batched
from batch_pipeline.names import GENERATION_SEPARATOR, generation_index, generation_product
from batch_pipeline.state.tracking.chat_answers import ChatAnswerRecords
from batch_pipeline.state.tracking.generation_records import GenerationRecords
from batch_pipeline.state.tracking.index_builds import IndexBuildRecords
from batch_pipeline.state.tracking.lease import lease
from batch_pipeline.state.tracking.provider_batches import ProviderBatchRecords
from batch_pipeline.state.tracking.run_records import RunRecord, run_counts
from batch_pipeline.state.tracking.schema import (
    connect,
    create_schema,
    documents,
    failures,
    pending,
    runs,
)
from batch_pipeline.transient import is_transient


@dataclass(frozen=True)
class LandedDocument:
    doc_id: str
    content_hash: str
    source_version: str
    fingerprint: str
    run_id: str
    landed_at: float
    source_changed_at: float | None = None


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


class TrackingUnavailableError(RuntimeError):
    """The tracking database cannot be opened; the message says which and what to set, and
    `transient` whether trying again may help (the server did not answer)."""

    def __init__(self, url: str, error: BaseException) -> None:
        self.transient = is_transient(error)
        try:
            sa.engine.make_url(url)
            shown = masked_url(url)
        except sa.exc.ArgumentError:
            shown = repr(url) if "@" not in url and "?" not in url else "(an unparsable URL)"
        cause = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        super().__init__(
            f"cannot open the tracking store at {shown}: {type(error).__name__}: {cause}; "
            "set BATCH_PIPELINE_TRACKING_URL to a reachable SQLAlchemy URL "
            "(or unset it to use SQLite under --home)"
        )


def _failure_row(row: sa.Row) -> dict[str, Any]:
    """A failures row for readers: its collection and its generation, each by name."""
    values = dict(row._mapping)
    index = values.pop("collection")
    return {"collection": generation_product(index), "generation": index, **values}


LANDING, LANDED = "landing", "landed"


def _landed(state: sa.ColumnElement) -> sa.ColumnElement:
    return sa.or_(state.is_(None), state == LANDED)


_RUN_KEYS = {column.name: column.key for column in runs.columns}


def _run_row(row: sa.Row) -> dict[str, Any]:
    """A runs row for readers, by column key (`generation`, `attempted`, ...), with what the
    run counted parsed (`counts`)."""
    values = {_RUN_KEYS[name]: value for name, value in row._mapping.items()}
    return {**values, "counts": run_counts(dict(row._mapping))}


class TrackingStore(GenerationRecords, ProviderBatchRecords, IndexBuildRecords, ChatAnswerRecords):
    """Document, failure, run and generation records for every collection."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = connect(url)
            create_schema(self.engine)
        except (sa.exc.SQLAlchemyError, ImportError) as error:
            raise TrackingUnavailableError(url, error) from None

    def dispose(self) -> None:
        self.engine.dispose()

    def landing_lease(self, index: str, owner: str, **timing: float) -> AbstractContextManager:
        """Hold generation `index`'s landing lease: one run lands into it at a time."""
        return lease(self.engine, index, owner, **timing)

    def partition_lease(
        self,
        partition: str,
        owner: str,
        on_wait: Callable[[str], None] | None = None,
        wait_seconds: float = 24 * 3600,
    ) -> AbstractContextManager:
        """Hold a partition's run lease: one run goes through its stages at a time; a second
        waits (hearing who holds it through `on_wait`) and then finds only what is still
        stale, instead of embedding the same documents twice."""
        return lease(
            self.engine, f"partition:{partition}", owner, wait_seconds=wait_seconds, on_wait=on_wait
        )

    # ------------------------------------------------------------------ documents

    def landed_documents(
        self, index: str, doc_ids: list[str] | None = None
    ) -> dict[str, LandedDocument]:
        """What tracking says is landed: every document, or only these `doc_ids`."""
        query = sa.select(
            documents.c.doc_id,
            documents.c.content_hash,
            documents.c.source_version,
            documents.c.fingerprint,
            documents.c.run_id,
            documents.c.landed_at,
            documents.c.source_changed_at,
        ).where(documents.c.generation == index)
        with self.engine.connect() as conn:
            if doc_ids is None:
                return {row.doc_id: LandedDocument(*row) for row in conn.execute(query)}
            found: dict[str, LandedDocument] = {}
            for batch in batched(doc_ids):
                rows = conn.execute(query.where(documents.c.doc_id.in_(batch)))
                found.update({row.doc_id: LandedDocument(*row) for row in rows})
            return found

    def record_landed(
        self,
        index: str,
        landed: list[dict[str, Any]],
        deleted: list[str],
        run_id: str,
        settled: list[str] = (),
    ) -> None:
        """Upsert landed documents, forget deleted ones and clear their failures, atomically.

        Pending changes of landed, deleted and `settled` (failed, recorded) documents are done.
        """
        now = time.time()
        ids = [doc["doc_id"] for doc in landed] + list(deleted)
        with self.engine.begin() as conn:
            for batch in batched(ids):
                for table in (documents, failures):
                    conn.execute(
                        table.delete().where(table.c.generation == index, table.c.doc_id.in_(batch))
                    )
            for batch in batched(ids + list(settled)):
                conn.execute(
                    pending.delete().where(
                        pending.c.generation == index, pending.c.doc_id.in_(batch)
                    )
                )
            if landed:
                conn.execute(
                    documents.insert(),
                    [
                        {"generation": index, "run_id": run_id, "landed_at": now, **doc}
                        for doc in landed
                    ],
                )

    def update_source_versions(self, index: str, versions: dict[str, str]) -> None:
        """Remember new versions of documents whose content did not change (touched files)."""
        if not versions:
            return
        with self.engine.begin() as conn:
            for doc_id, version in versions.items():
                conn.execute(
                    documents.update()
                    .where(documents.c.generation == index, documents.c.doc_id == doc_id)
                    .values(source_version=version)
                )

    def forget_content(self, index: str, doc_ids: list[str]) -> None:
        """Forget what these documents' landed content was, so the next run reads them again."""
        with self.engine.begin() as conn:
            for batch in batched(doc_ids):
                conn.execute(
                    documents.update()
                    .where(documents.c.generation == index, documents.c.doc_id.in_(batch))
                    .values(content_hash="", source_version="")
                )

    def iter_documents(
        self, index: str, columns: list[str], page_rows: int = 10000
    ) -> Iterator[list[tuple]]:
        """These columns of every landed document, streamed a page of rows at a time."""
        query = sa.select(*(documents.c[name] for name in columns)).where(
            documents.c.generation == index
        )
        with self.engine.connect() as conn:
            result = conn.execution_options(yield_per=page_rows).execute(query)
            for page in result.partitions():
                yield [tuple(row) for row in page]

    def landed_doc_ids(self, index: str) -> set[str]:
        query = sa.select(documents.c.doc_id).where(documents.c.generation == index)
        with self.engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def document_count(self, index: str) -> int:
        query = sa.select(sa.func.count()).where(documents.c.generation == index)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    # ------------------------------------------------------------ pending changes

    def record_pending(self, index: str, changes: dict[str, float | None]) -> None:
        """Remember source changes not yet landed (the earliest change time wins)."""
        if not changes:
            return
        now = time.time()

        def insert_missing(conn: sa.Connection) -> None:
            known = {
                doc_id
                for batch in batched(changes)
                for doc_id in conn.execute(
                    sa.select(pending.c.doc_id).where(
                        pending.c.generation == index, pending.c.doc_id.in_(batch)
                    )
                ).scalars()
            }
            new = [
                {
                    "generation": index,
                    "doc_id": doc_id,
                    "changed_at": changed_at or now,
                    "detected_at": now,
                }
                for doc_id, changed_at in changes.items()
                if doc_id not in known
            ]
            if new:
                conn.execute(pending.insert(), new)

        self._write_racing_inserts(insert_missing)

    def freshness(self, index: str) -> dict[str, float | int | None]:
        """Newest source change landed, oldest change pending, and how many are pending."""
        with self.engine.connect() as conn:
            newest = conn.execute(
                sa.select(sa.func.max(documents.c.source_changed_at)).where(
                    documents.c.generation == index
                )
            ).scalar()
            oldest, count = conn.execute(
                sa.select(sa.func.min(pending.c.changed_at), sa.func.count()).where(
                    pending.c.generation == index
                )
            ).one()
        return {"newest_landed": newest, "oldest_pending": oldest, "pending": int(count)}

    # ------------------------------------------------------------------- failures

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

        self._write_racing_inserts(upsert)

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

    def _write_racing_inserts(self, write: Callable[[sa.Connection], None]) -> None:
        """Run `write` in one transaction; rerun it if a concurrent run inserted a key first.

        Two runs of one partition collect at once and record the same documents. Whichever
        commits second meets a unique-key conflict; its rerun sees the winner's rows and
        merges into them. Plain SQL, so it holds on SQLite, PostgreSQL and any other database.
        """
        for attempt in range(20):
            try:
                with self.engine.begin() as conn:
                    write(conn)
                return
            except sa.exc.IntegrityError:
                if attempt == 19:
                    raise
                time.sleep(0.05 * (attempt + 1))

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

    # ----------------------------------------------------------------------- runs

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

    def chunk_total(self, index: str) -> int:
        """Chunks of every landed document of generation `index`."""
        query = sa.select(sa.func.coalesce(sa.func.sum(documents.c.chunk_count), 0)).where(
            documents.c.generation == index
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

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
