"""Documents in a SQL table or query, read through SQLAlchemy (SQLite, PostgreSQL, ...).

The doc id is the id column as text; the version is the updated-at column. Rows whose deleted
flag is true count as deleted. Every value goes into SQL as a bound parameter; column and
table names come from the configuration and are quoted as identifiers.
"""

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

import sqlalchemy as sa

from batch_pipeline.config import masked_url
from batch_pipeline.iterables import batched
from batch_pipeline.sources.base import (
    ChangeSet,
    DocumentReadError,
    DocumentSource,
    RawDocument,
    SourceEntry,
    SourceUnavailableError,
)
from batch_pipeline.transient import is_transient


def safe_url(url: str) -> str:
    """A SQLAlchemy URL as it may be shown: its password and query credentials hidden."""
    return masked_url(url)


def reflect_table(engine: sa.Engine, name: str, setting: str, where: str) -> sa.Table:
    """The table `name` (schema.table allowed) as the database describes it. A missing table
    names the `setting` it came from; any other failure says that `where` did not answer."""
    schema, _, table = name.rpartition(".")
    try:
        return sa.Table(table, sa.MetaData(), schema=schema or None, autoload_with=engine)
    except sa.exc.NoSuchTableError:
        raise SourceUnavailableError(
            f"{setting}: table {name!r} does not exist ({where})"
        ) from None
    except (sa.exc.SQLAlchemyError, OSError) as error:
        raise SourceUnavailableError(
            f"cannot open {where}: {type(error).__name__}: {error}", is_transient(error)
        ) from None


def check_columns(present: Iterable[str], configured: Iterable[tuple[str, str]], where: str):  # noqa: ANN201
    """Each (setting, column) configured names a column that is `present`, or the error
    names the setting and lists the columns there are."""
    present = set(present)
    for setting, name in configured:
        if name not in present:
            raise SourceUnavailableError(
                f"{setting}: {where} has no column {name!r}; it has {', '.join(sorted(present))}"
            )


def _timestamp(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, int | float):
        return float(value)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def _plain(value: object) -> object:
    """A column value as JSON can hold it (times and dates in ISO 8601)."""
    if isinstance(value, str | int | float | bool):
        return value
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _version(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


class SqlSource(DocumentSource):
    kind = "sql"

    def __init__(
        self,
        url: str,
        table: str | None = None,
        query: str | None = None,
        id_column: str = "id",
        title_column: str | None = "title",
        body_column: str = "body",
        updated_at_column: str = "updated_at",
        deleted_column: str | None = None,
        fmt: str = "text",
        metadata_columns: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.url = url
        self.engine = sa.create_engine(url, pool_pre_ping=True)
        self.table_name = table
        self.query = query
        self.id_column = id_column
        self.title_column = title_column
        self.body_column = body_column
        self.updated_at_column = updated_at_column
        self.deleted_column = deleted_column
        self.fmt = fmt
        self.metadata_columns = list(metadata_columns)
        self._source: sa.FromClause | None = None

    def describe(self) -> str:
        return f"{safe_url(self.url)} {self.table_name or '(query)'}"

    def check(self) -> None:
        """The table (or query) and every configured column exist."""
        present = self._from().c.keys() if self.table_name else self._query_columns()
        configured = [(f"source.{setting}", name) for setting, name in self._configured_columns()]
        check_columns(present, configured, self.describe())

    def _configured_columns(self) -> list[tuple[str, str]]:
        columns = [
            ("id_column", self.id_column),
            ("title_column", self.title_column),
            ("body_column", self.body_column),
            ("updated_at_column", self.updated_at_column),
            ("deleted_column", self.deleted_column),
            *(("metadata_columns", name) for name in self.metadata_columns),
        ]
        return [(setting, name) for setting, name in columns if name]

    def _query_columns(self) -> list[str]:
        """The columns the configured query returns (it is run with LIMIT 0)."""
        statement = sa.select(sa.text("*")).select_from(sa.text(f"({self.query}) AS q")).limit(0)
        try:
            with self.engine.connect() as conn:
                return list(conn.execute(statement).keys())
        except (sa.exc.SQLAlchemyError, OSError) as error:
            raise SourceUnavailableError(
                f"source.query: cannot run it on {self.describe()}: {type(error).__name__}: "
                f"{error}",
                is_transient(error),
            ) from None

    def _from(self) -> sa.FromClause:
        if self._source is None:
            if self.table_name:
                self._source = reflect_table(
                    self.engine, self.table_name, "source.table", self.describe()
                )
            else:
                self._source = sa.text(self.query).columns().subquery("src")
        return self._source

    def _col(self, name: str) -> sa.ColumnElement:
        source = self._from()
        if self.table_name:
            if name not in source.c:
                raise SourceUnavailableError(f"{self.describe()} has no column {name!r}")
            return source.c[name]
        return sa.column(name, _selectable=source)

    def _id_filters(self, doc_ids: Iterable[str]) -> Iterator[sa.ColumnElement[bool]]:
        """`id IN (...)` conditions, a batch at a time, with ids bound as the column's type.

        A table's id column has a known type; a query's does not, so it is compared as text.
        """
        column = self._col(self.id_column)
        if self.table_name:
            try:
                python_type = column.type.python_type
            except NotImplementedError:
                python_type = str
            values = []
            for doc_id in doc_ids:
                try:
                    values.append(python_type(doc_id) if python_type is int else doc_id)
                except ValueError:
                    continue  # not a valid id of this table: cannot exist
        else:
            column, values = sa.cast(column, sa.String), list(doc_ids)
        for batch in batched(values):
            yield column.in_(batch)

    def _execute(self, statement: sa.Executable) -> list[sa.Row]:
        try:
            with self.engine.connect() as conn:
                return list(conn.execute(statement))
        except (sa.exc.OperationalError, sa.exc.InterfaceError, OSError) as error:
            raise SourceUnavailableError(
                f"cannot reach {self.describe()}: {type(error).__name__}", is_transient(error)
            ) from None

    def _entry_columns(self) -> list[sa.ColumnElement]:
        columns = [self._col(self.id_column), self._col(self.updated_at_column)]
        if self.deleted_column:
            columns.append(self._col(self.deleted_column))
        return columns

    def _to_entry(self, row: sa.Row) -> SourceEntry | None:
        if self.deleted_column and row[2]:
            return None
        return SourceEntry(str(row[0]), _version(row[1]), None, _timestamp(row[1]))

    def list_entries(self) -> Iterator[SourceEntry]:
        statement = sa.select(*self._entry_columns()).order_by(self._col(self.id_column))
        for row in self._execute(statement):
            entry = self._to_entry(row)
            if entry is not None:
                yield entry

    def entries_for(self, doc_ids: list[str]) -> Iterator[SourceEntry]:
        for condition in self._id_filters(doc_ids):
            statement = sa.select(*self._entry_columns()).where(condition)
            for row in self._execute(statement):
                entry = self._to_entry(row)
                if entry is not None:
                    yield entry

    def read(self, doc_id: str) -> RawDocument:
        for _, result in self.read_many([doc_id]):
            if isinstance(result, DocumentReadError):
                raise result
            return result
        raise DocumentReadError(f"row {doc_id!r} was deleted before it could be read")

    def read_many(
        self, doc_ids: Iterable[str]
    ) -> Iterator[tuple[str, RawDocument | DocumentReadError]]:
        wanted = list(doc_ids)
        columns = [self._col(self.id_column), self._col(self.body_column)]
        columns.append(self._col(self.title_column) if self.title_column else sa.null())
        columns += [self._col(name) for name in self.metadata_columns]
        found: dict[str, sa.Row] = {}
        for condition in self._id_filters(wanted):
            statement = sa.select(*columns).where(condition)
            for row in self._execute(statement):
                found[str(row[0])] = row
        for doc_id in wanted:
            row = found.get(doc_id)
            if row is None:
                yield doc_id, DocumentReadError(f"row {doc_id!r} was deleted before it was read")
            elif row[1] is None:
                yield doc_id, DocumentReadError(f"row {doc_id!r} has a NULL {self.body_column}")
            else:
                body = row[1] if isinstance(row[1], bytes) else str(row[1]).encode("utf-8")
                title = str(row[2]) if self.title_column and row[2] is not None else None
                metadata = {
                    name: _plain(value)
                    for name, value in zip(self.metadata_columns, row[3:], strict=True)
                    if value is not None
                }
                yield doc_id, RawDocument(body, title=title, fmt=self.fmt, metadata=metadata)

    def changes_since(self, state: dict | None) -> ChangeSet:
        """Rows whose updated-at is at or after the cursor, minus the ids already seen at it.

        The cursor keeps the greatest updated-at and the ids seen at that instant, so a row
        written later with the same timestamp is not skipped. Hard deletes are not visible
        here; the nightly reconciliation finds them.
        """
        state = state or {}
        since = state.get("updated_at")
        seen = set(state.get("ids", []))
        statement = self.changes_statement(since)
        result = ChangeSet()
        newest, at_newest = since, set(seen)
        for row in self._execute(statement):
            doc_id, version = str(row[0]), _version(row[1])
            if version == since and doc_id in seen:
                continue
            if self.deleted_column and row[2]:
                result.deleted.append(doc_id)
            else:
                result.changed.append(SourceEntry(doc_id, version, None, _timestamp(row[1])))
            if version != newest:  # rows come in updated-at order: a later instant
                newest, at_newest = version, set()
            at_newest.add(doc_id)
        result.state = {"updated_at": newest, "ids": sorted(at_newest)}
        return result

    def changes_statement(self, since: str | None) -> sa.Select:
        """The query a sensor tick runs: rows updated at or after the cursor, in updated-at
        order. A plain range on the bare column, so an index on it (`CREATE INDEX ... ON
        table (updated_at)`) makes a tick cost O(changes), not O(rows)."""
        updated = self._col(self.updated_at_column)
        statement = sa.select(*self._entry_columns()).order_by(updated)
        if since is not None:
            statement = statement.where(updated >= self._cursor_value(since))
        return statement

    def _cursor_value(self, since: str) -> object:
        column = self._col(self.updated_at_column)
        try:
            python_type = column.type.python_type
        except NotImplementedError:
            return since
        if python_type is datetime:
            return datetime.fromisoformat(since)
        return python_type(since) if python_type in (int, float) else since
