"""Which failures are transient (worth a retry), on the real exception types of the clients
the pipeline talks through: Python's, botocore's, SQLAlchemy's and SQLite's."""

import errno
import sqlite3

import pytest
import sqlalchemy as sa
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from batch_pipeline.sources.base import SourceUnavailableError
from batch_pipeline.state.tracking.store import TrackingStore, TrackingUnavailableError
from batch_pipeline.transient import is_transient


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "ListObjectsV2",
    )


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(errno.ECONNRESET, "reset"),
        TimeoutError("timed out"),
        OSError(errno.EHOSTUNREACH, "no route to host"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
        client_error("SlowDown", 503),
        client_error("ThrottlingException", 400),
        client_error("TooManyRequests", 429),
        client_error("InternalError", 500),
        sqlite3.OperationalError("database is locked"),
        RuntimeError("Commit conflict for version 7: another writer committed first"),
        SourceUnavailableError("cannot reach the bucket", transient=True),
    ],
    ids=repr,
)
def test_transient_failures(error):
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        KeyError("title"),
        ValueError("bad value"),
        ZeroDivisionError(),
        FileNotFoundError(errno.ENOENT, "no such file"),
        PermissionError(errno.EACCES, "permission denied"),
        NoCredentialsError(),
        client_error("NoSuchBucket", 404),
        client_error("AccessDenied", 403),
        sqlite3.OperationalError("no such table: articles"),
        SourceUnavailableError("source.table: table 'x' does not exist"),
        MemoryError(),
    ],
    ids=repr,
)
def test_failures_that_would_fail_again(error):
    assert not is_transient(error)


def test_the_chain_it_was_raised_from_is_looked_at():
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "reset by peer")
        except ConnectionResetError as reset:
            raise RuntimeError("could not write the batch") from reset
    except RuntimeError as wrapped:
        assert is_transient(wrapped)
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "reset by peer")
        except ConnectionResetError:
            raise KeyError("a bug while handling it") from None  # the cause is cut off
    except KeyError as cut:
        assert not is_transient(cut)
    # an error that says which it is is taken at its word, whatever it was raised from
    said = SourceUnavailableError("source.table: table 'x' does not exist", transient=False)
    said.__cause__ = TimeoutError()
    assert not is_transient(said)


def test_sqlite_locked_and_missing_table_through_sqlalchemy(tmp_path):
    """A real SQLite file, written by one connection while another asks: locked is transient,
    a missing table is not (SQLite raises both as OperationalError)."""
    path = tmp_path / "tracking.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE runs (id INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        with (
            pytest.raises(sa.exc.OperationalError, match="locked") as locked,
            engine.begin() as conn,
        ):
            conn.execute(sa.text("INSERT INTO runs VALUES (1)"))
        assert is_transient(locked.value)
        holder.execute("ROLLBACK")
        with (
            pytest.raises(sa.exc.OperationalError, match="no such table") as missing,
            engine.connect() as conn,
        ):
            conn.execute(sa.text("SELECT * FROM nowhere"))
        assert not is_transient(missing.value)
    finally:
        holder.close()
        engine.dispose()


def test_an_unreachable_tracking_store_is_transient_and_a_bad_url_is_not():
    with pytest.raises(TrackingUnavailableError) as unreachable:
        TrackingStore("postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2")
    assert unreachable.value.transient and is_transient(unreachable.value)
    with pytest.raises(TrackingUnavailableError) as bad:
        TrackingStore("nosuchdialect://x/y")
    assert not is_transient(bad.value)
