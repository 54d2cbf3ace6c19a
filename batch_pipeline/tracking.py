"""The tracking store: what has landed, what failed, and each run's summary.

SQLAlchemy Core over any URL: SQLite under the pipeline home by default, PostgreSQL in
production. Every value is a bound parameter, never formatted into SQL.
"""

import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

metadata = sa.MetaData()

documents = sa.Table(
    "documents",
    metadata,
    sa.Column("collection", sa.String(128), primary_key=True),
    sa.Column("doc_id", sa.String(2048), primary_key=True),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("source_version", sa.String(256), nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("chunk_count", sa.Integer, nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("landed_at", sa.Float, nullable=False),
    sa.Column("source_changed_at", sa.Float),
    sa.Column("chunk_digest", sa.String(64)),
)

# Source changes seen (by the publish sensor or a collect) and not yet landed.
pending = sa.Table(
    "pending_changes",
    metadata,
    sa.Column("collection", sa.String(128), primary_key=True),
    sa.Column("doc_id", sa.String(2048), primary_key=True),
    sa.Column("changed_at", sa.Float, nullable=False),
    sa.Column("detected_at", sa.Float, nullable=False),
)

failures = sa.Table(
    "failures",
    metadata,
    sa.Column("collection", sa.String(128), primary_key=True),
    sa.Column("doc_id", sa.String(2048), primary_key=True),
    sa.Column("stage", sa.String(32), nullable=False),
    sa.Column("reason", sa.String(64), nullable=False),
    sa.Column("error_class", sa.String(128), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("content_hash", sa.String(64)),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("failed_at", sa.Float, nullable=False),
    sa.Column("source_version", sa.String(256)),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("collection", sa.String(128), primary_key=True),
    sa.Column("finished_at", sa.Float, nullable=False),
    sa.Column("model_name", sa.Text, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("docs_landed", sa.Integer, nullable=False),
    sa.Column("docs_deleted", sa.Integer, nullable=False),
    sa.Column("docs_failed", sa.Integer, nullable=False),
    sa.Column("chunks_embedded", sa.Integer, nullable=False),
    sa.Column("chunks_reused", sa.Integer, nullable=False),
    sa.Column("chunks_removed", sa.Integer, nullable=False),
    sa.Column("table_version", sa.Integer),
    sa.Column("table_version_before", sa.Integer),
)

# One row per collection and model fingerprint: building, candidate, live, retired, dropped.
generations = sa.Table(
    "generations",
    metadata,
    sa.Column("collection", sa.String(128), primary_key=True),
    sa.Column("fingerprint", sa.String(64), primary_key=True),
    sa.Column("index_name", sa.String(256), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("model_config", sa.Text, nullable=False),
    sa.Column("full_pass", sa.Boolean, nullable=False),
    sa.Column("full_passes", sa.Text),  # JSON: partitions (shards) that had a full pass
    sa.Column("documents", sa.Integer, nullable=False),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("complete", sa.Boolean, nullable=False),
    sa.Column("scores", sa.Text),
    sa.Column("decision", sa.Text),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("promoted_at", sa.Float),
    sa.Column("retired_at", sa.Float),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("collection", sa.String(128), nullable=False),
    sa.Column("from_index", sa.String(256)),
    sa.Column("to_index", sa.String(256)),
    sa.Column("details", sa.Text),
)


# One row per collection while a run lands into it (a lease, so a killed holder expires).
locks = sa.Table(
    "collection_locks",
    metadata,
    sa.Column("collection", sa.String(128), primary_key=True),
    sa.Column("owner", sa.String(128), nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Column("host", sa.String(255)),
    sa.Column("pid", sa.Integer),
)


def _process_is_gone(host: str | None, pid: int | None) -> bool:
    """True when the holder ran on this host and its process no longer exists."""
    if host != socket.gethostname() or not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class LockTimeoutError(RuntimeError):
    """Another run held the collection's landing lock for too long."""


@dataclass(frozen=True)
class LandedDocument:
    doc_id: str
    content_hash: str
    source_version: str
    fingerprint: str
    run_id: str
    landed_at: float
    source_changed_at: float | None = None


@dataclass(frozen=True)
class FailureRecord:
    doc_id: str
    stage: str
    reason: str
    error_class: str
    message: str
    content_hash: str | None = None
    source_version: str | None = None


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 60})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(conn, _record) -> None:  # noqa: ANN001
            cursor = conn.cursor()
            cursor.execute("PRAGMA busy_timeout=60000")
            # Switching to WAL answers "database is locked" at once, without waiting, while
            # another process writes; the mode persists in the file, so only switch once.
            for attempt in range(100):
                if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                    break
                try:
                    cursor.execute("PRAGMA journal_mode=WAL")
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or attempt == 99:
                        raise
                    time.sleep(0.1)
            cursor.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


class TrackingStore:
    """Document, failure and run records for every collection."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            from pathlib import Path

            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine = _engine(url)
        self._create_schema()

    def _create_schema(self) -> None:
        """Create missing tables and columns; safe when several processes start at once."""
        for attempt in range(10):
            try:
                metadata.create_all(self.engine)
                self._add_missing_columns()
                return
            except sa.exc.DBAPIError as error:  # another process created it first
                text = str(error).lower()
                racing = "already exists" in text or "duplicate" in text
                if not racing or attempt == 9:
                    raise
                time.sleep(0.1 * (attempt + 1))

    def _add_missing_columns(self) -> None:
        """Forward-only migration: add nullable columns that newer versions introduced."""
        inspector = sa.inspect(self.engine)
        with self.engine.begin() as conn:
            for table in metadata.sorted_tables:
                present = {c["name"] for c in inspector.get_columns(table.name)}
                for column in table.columns:
                    if column.name not in present and column.nullable:
                        kind = column.type.compile(dialect=self.engine.dialect)
                        conn.execute(
                            sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}')
                        )

    def dispose(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ documents

    def landed_documents(
        self, collection: str, doc_ids: list[str] | None = None
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
        ).where(documents.c.collection == collection)
        with self.engine.connect() as conn:
            if doc_ids is None:
                return {row.doc_id: LandedDocument(*row) for row in conn.execute(query)}
            found: dict[str, LandedDocument] = {}
            for start in range(0, len(doc_ids), 500):
                batch = query.where(documents.c.doc_id.in_(doc_ids[start : start + 500]))
                found.update({row.doc_id: LandedDocument(*row) for row in conn.execute(batch)})
            return found

    def record_landed(
        self,
        collection: str,
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
        done = ids + list(settled)
        with self.engine.begin() as conn:
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                conn.execute(
                    documents.delete().where(
                        documents.c.collection == collection, documents.c.doc_id.in_(batch)
                    )
                )
                conn.execute(
                    failures.delete().where(
                        failures.c.collection == collection, failures.c.doc_id.in_(batch)
                    )
                )
            for start in range(0, len(done), 500):
                conn.execute(
                    pending.delete().where(
                        pending.c.collection == collection,
                        pending.c.doc_id.in_(done[start : start + 500]),
                    )
                )
            if landed:
                conn.execute(
                    documents.insert(),
                    [
                        {
                            "collection": collection,
                            "run_id": run_id,
                            "landed_at": now,
                            **doc,
                        }
                        for doc in landed
                    ],
                )

    def update_source_versions(self, collection: str, versions: dict[str, str]) -> None:
        """Remember new versions of documents whose content did not change (touched files)."""
        if not versions:
            return
        with self.engine.begin() as conn:
            for doc_id, version in versions.items():
                conn.execute(
                    documents.update()
                    .where(documents.c.collection == collection, documents.c.doc_id == doc_id)
                    .values(source_version=version)
                )

    # ---------------------------------------------------------------- locking

    @contextmanager
    def collection_lock(
        self, collection: str, owner: str, lease_seconds: float = 120, wait_seconds: float = 900
    ) -> Iterator[None]:
        """Serialise landing into one collection across processes and machines.

        A lease row in the tracking database (SQLite or PostgreSQL alike): the first insert
        wins, and a heartbeat renews the lease while the holder works. A holder that died
        (SIGKILL, lost node) stops renewing, so its lease expires after `lease_seconds`; on
        the same host a dead holder's lease is taken over at once.
        """
        deadline = time.monotonic() + wait_seconds
        while True:
            now = time.time()
            try:
                with self.engine.begin() as conn:
                    conn.execute(
                        locks.delete().where(
                            locks.c.collection == collection, locks.c.expires_at < now
                        )
                    )
                    holder = conn.execute(
                        sa.select(locks.c.owner, locks.c.host, locks.c.pid).where(
                            locks.c.collection == collection
                        )
                    ).first()
                    if holder is not None and _process_is_gone(holder.host, holder.pid):
                        conn.execute(
                            locks.delete().where(
                                locks.c.collection == collection, locks.c.owner == holder.owner
                            )
                        )
                    conn.execute(
                        locks.insert().values(
                            collection=collection,
                            owner=owner,
                            expires_at=now + lease_seconds,
                            host=socket.gethostname(),
                            pid=os.getpid(),
                        )
                    )
                break
            except sa.exc.IntegrityError:
                if time.monotonic() > deadline:
                    raise LockTimeoutError(
                        f"collection {collection!r} is being landed by another run; "
                        f"gave up after {wait_seconds:.0f}s"
                    ) from None
                time.sleep(0.2)
        stop = threading.Event()

        def heartbeat() -> None:
            while not stop.wait(lease_seconds / 4):
                with self.engine.begin() as conn:
                    conn.execute(
                        locks.update()
                        .where(locks.c.collection == collection, locks.c.owner == owner)
                        .values(expires_at=time.time() + lease_seconds)
                    )

        renewer = threading.Thread(target=heartbeat, name="lease-heartbeat", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()
            with self.engine.begin() as conn:
                conn.execute(
                    locks.delete().where(locks.c.collection == collection, locks.c.owner == owner)
                )

    # ------------------------------------------------------------ pending changes

    def record_pending(self, collection: str, changes: dict[str, float | None]) -> None:
        """Remember source changes not yet landed (the earliest change time wins)."""
        if not changes:
            return
        now = time.time()

        def insert_missing(conn: sa.Connection) -> None:
            known = {
                row.doc_id
                for start in range(0, len(changes), 500)
                for row in conn.execute(
                    sa.select(pending.c.doc_id).where(
                        pending.c.collection == collection,
                        pending.c.doc_id.in_(list(changes)[start : start + 500]),
                    )
                )
            }
            new = [
                {
                    "collection": collection,
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

    def freshness(self, collection: str) -> dict[str, float | int | None]:
        """Newest source change landed, oldest change pending, and how many are pending."""
        with self.engine.connect() as conn:
            newest = conn.execute(
                sa.select(sa.func.max(documents.c.source_changed_at)).where(
                    documents.c.collection == collection
                )
            ).scalar()
            oldest, count = conn.execute(
                sa.select(sa.func.min(pending.c.changed_at), sa.func.count()).where(
                    pending.c.collection == collection
                )
            ).one()
        return {"newest_landed": newest, "oldest_pending": oldest, "pending": int(count)}

    def iter_documents(
        self, collection: str, columns: list[str], page_rows: int = 10000
    ) -> Iterator[list[tuple]]:
        """These columns of every landed document, streamed a page of rows at a time."""
        query = sa.select(*(documents.c[name] for name in columns)).where(
            documents.c.collection == collection
        )
        with self.engine.connect() as conn:
            result = conn.execution_options(yield_per=page_rows).execute(query)
            for page in result.partitions():
                yield [tuple(row) for row in page]

    def chunk_counts(self, collection: str) -> dict[str, int]:
        query = sa.select(documents.c.doc_id, documents.c.chunk_count).where(
            documents.c.collection == collection
        )
        with self.engine.connect() as conn:
            return {row.doc_id: row.chunk_count for row in conn.execute(query)}

    def document_count(self, collection: str) -> int:
        query = sa.select(sa.func.count()).where(documents.c.collection == collection)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    # ------------------------------------------------------------------- failures

    def record_failures(self, collection: str, records: list[FailureRecord], run_id: str) -> None:
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
                    .where(failures.c.collection == collection, failures.c.doc_id == record.doc_id)
                    .values(attempts=failures.c.attempts + 1, **values)
                )
                if counted.rowcount == 0:
                    conn.execute(
                        failures.insert().values(
                            collection=collection, doc_id=record.doc_id, attempts=1, **values
                        )
                    )

        self._write_racing_inserts(upsert)

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

    def failures_by_doc(self, collection: str) -> dict[str, dict[str, Any]]:
        return {row["doc_id"]: row for row in self.list_failures(collection)}

    def list_failures(self, collection: str | None = None) -> list[dict[str, Any]]:
        query = sa.select(failures).order_by(failures.c.collection, failures.c.doc_id)
        if collection is not None:
            query = query.where(failures.c.collection == collection)
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    # ----------------------------------------------------------------------- runs

    def record_run(self, **values: Any) -> None:
        key = (runs.c.run_id == values["run_id"], runs.c.collection == values["collection"])
        with self.engine.begin() as conn:
            conn.execute(runs.delete().where(*key))
            conn.execute(runs.insert().values(finished_at=time.time(), **values))

    def run_finished(self, collection: str, run_id: str) -> bool:
        """Whether this run landed into `collection` (it recorded its run)."""
        query = sa.select(runs.c.run_id).where(
            runs.c.collection == collection, runs.c.run_id == run_id
        )
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def last_run(self, collection: str) -> dict[str, Any] | None:
        query = (
            sa.select(runs)
            .where(runs.c.collection == collection)
            .order_by(runs.c.finished_at.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return dict(row._mapping) if row else None
