"""Which failures are transient: worth trying again as they are.

A transient failure says nothing about the work: a connection dropped, refused or timed out,
a service throttled the call or failed on its side (an HTTP 5xx), a database was locked or
went away, a commit lost a race with a concurrent writer. Anything else (a bug, a bad
config, missing data, a refused permission) fails the same way on every try, so retrying it
only delays the error an operator has to read.

An error can say which it is itself: one with a boolean `transient` attribute (the sources'
`DocumentReadError` and `SourceUnavailableError`, the tracking store's
`TrackingUnavailableError`) is taken at its word, since those errors are raised `from None`
to keep credentials out of their messages and so carry no cause to look at. Otherwise the
error and the errors it was raised from are classified by type: Python's own connection and
timeout errors, botocore's, SQLAlchemy's and SQLite's.
"""

import errno
import sqlite3

# OSError numbers of a network or a device that may answer next time
TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EPIPE,
        errno.EAGAIN,
        errno.EBUSY,
    }
)
# AWS error codes that mean "try again": throttling and the service's own trouble (botocore's
# retry handler treats the same as retryable)
TRANSIENT_AWS_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
    }
)
# SQLite's messages for a database another connection holds
SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")


def is_commit_conflict(error: BaseException) -> bool:
    """A LanceDB commit that lost the race with a concurrent writer's ("Commit conflict for
    version ..."); SQL errors never get here, their types decide first."""
    return "conflict" in str(error).lower()


def _aws_transient(error: BaseException) -> bool | None:
    try:
        from botocore.exceptions import ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError
    except ImportError:  # pragma: no cover - botocore comes with dagster-aws
        return None
    if isinstance(error, BotoConnectionError | HTTPClientError):
        return True  # no answer: refused, closed, timed out
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in TRANSIENT_AWS_CODES or status >= 500 or status == 429
    return None


def _sql_transient(error: BaseException) -> bool | None:
    if isinstance(error, sqlite3.OperationalError):
        return any(busy in str(error).lower() for busy in SQLITE_BUSY)
    try:
        import sqlalchemy.exc as sa_exc
    except ImportError:  # pragma: no cover - sqlalchemy is a dependency
        return None
    if isinstance(error, sa_exc.DisconnectionError | sa_exc.TimeoutError):
        return True  # the server went away; the pool found no connection in time
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        if isinstance(error.orig, sqlite3.OperationalError):  # also "no such table": look
            return _sql_transient(error.orig)
        # the server could not be reached or dropped the connection, a deadlock or a
        # serialization failure (PostgreSQL's drivers raise these as OperationalError)
        return isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError)
    return None


def _transient(error: BaseException) -> bool | None:
    """This error alone: True or False where its type says, else None."""
    said = getattr(error, "transient", None)
    if isinstance(said, bool):
        return said
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    for verdict in (_aws_transient(error), _sql_transient(error)):
        if verdict is not None:
            return verdict
    if is_commit_conflict(error):  # LanceDB raises it as an OSError or a RuntimeError
        return True
    if isinstance(error, OSError):
        return error.errno in TRANSIENT_ERRNOS
    return None


def is_transient(error: BaseException) -> bool:
    """Whether `error` is transient: it, or the first error down the chain it was raised from
    whose type says either way, is a transient failure (see the module's doc)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        verdict = _transient(current)
        if verdict is not None:
            return verdict
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return False
