"""One day's ticket export, from a folder, an S3 bucket or a SQL table.

A folder or bucket holds one JSONL file per day (`2026-11-29.jsonl`); a SQL table holds every
ticket, and a day is the rows whose `created_at` falls in it, in the configured time zone.
Every reader yields the raw rows as dicts (`id`, `created_at`, `subject`, `body`, `channel`,
`label`); checking them is collect's job. A folder or bucket day with no file raises
`ExportMissingError`: an export that has not arrived yet must not land as an empty day.
"""

import json
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from batch_pipeline.config import (
    TicketExportConfig,
    TicketFolderExport,
    TicketS3Export,
    TicketSqlExport,
)
from batch_pipeline.sources import S3ClientFactory
from batch_pipeline.sources.base import SourceUnavailableError
from batch_pipeline.transient import is_transient

TICKET_FIELDS = ("id", "created_at", "subject", "body", "channel", "label")
INVALID_JSON = "__invalid_json__"  # the key a line that is not a JSON object is reported under
INVALID_UTF8 = "__invalid_utf8__"  # and one that is not UTF-8


class ExportMissingError(SourceUnavailableError):
    """The day's export file is not there (yet), or is empty (0 bytes, as a truncated or
    half-written file is): the run fails rather than empty a classified day."""


def _empty_export(day: date, where: str) -> ExportMissingError:
    return ExportMissingError(
        f"the ticket export for {day} is empty (0 bytes): {where}; taken as not arrived, so "
        "the day keeps its rows (a day with no tickets needs no file)"
    )


def day_bounds(day: date, timezone: str) -> tuple[datetime, datetime]:
    """The day's first instant and the next day's, in `timezone` (aware datetimes)."""
    zone = ZoneInfo(timezone)
    start = datetime.combine(day, time(), zone)
    return start, datetime.combine(day + timedelta(days=1), time(), zone)


def _jsonl_rows(lines: Iterator[bytes]) -> Iterator[dict]:
    """Each line's object; a line that is not UTF-8, or not one, comes out as a row holding
    the problem (under `INVALID_UTF8` or `INVALID_JSON`), so collect records it and the rest
    of the day still lands."""
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            problem = f"line {number}: not UTF-8 (byte {error.start}: {raw[error.start]:#04x})"
            yield {INVALID_UTF8: problem, "id": f"line-{number}"}
            continue
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problem = None if isinstance(row, dict) else "not a JSON object"
        except ValueError as error:
            problem = str(error)
        if problem is not None:
            yield {INVALID_JSON: f"line {number}: {problem}", "id": f"line-{number}"}
        else:
            yield row


class TicketExport:
    """Reads a day's tickets; `check()` fails early, naming the setting, when it cannot."""

    def describe(self) -> str:
        raise NotImplementedError

    def check(self) -> None:
        """Cheap: the export's location exists."""

    def has_day(self, day: date) -> bool:
        """Whether the day's export is there (a table always has every day)."""
        return True

    def day_changed_at(self, day: date) -> float | None:
        """When the day's export file was last written (epoch seconds); None when it is not
        there, or when the export is a table (its days have no file time)."""
        return None

    def day_row_count(self, day: date) -> int | None:
        """How many tickets a table holds for the day (None for a file export: its file
        time tells whether it changed)."""
        return None

    def read_day(self, day: date) -> Iterator[dict]:
        raise NotImplementedError


class FolderExport(TicketExport):
    def __init__(self, config: TicketFolderExport) -> None:
        self.folder = Path(config.path)
        self.pattern = config.file_pattern

    def describe(self) -> str:
        return str(self.folder / self.pattern)

    def check(self) -> None:
        if not self.folder.is_dir():
            raise SourceUnavailableError(f"tickets.source.path: folder not found: {self.folder}")

    def has_day(self, day: date) -> bool:
        return self.day_changed_at(day) is not None

    def day_changed_at(self, day: date) -> float | None:
        """An empty file is not there yet."""
        try:
            stat = (self.folder / self.pattern.format(day=day.isoformat())).stat()
        except FileNotFoundError:
            return None
        return stat.st_mtime if stat.st_size else None

    def read_day(self, day: date) -> Iterator[dict]:
        path = self.folder / self.pattern.format(day=day.isoformat())
        if not path.is_file():
            raise ExportMissingError(f"no ticket export for {day}: {path} does not exist")
        if path.stat().st_size == 0:
            raise _empty_export(day, str(path))
        with path.open("rb") as lines:
            yield from _jsonl_rows(lines)


class S3Export(TicketExport):
    def __init__(self, config: TicketS3Export, client: object) -> None:
        self.client = client
        self.bucket = config.bucket
        self.prefix = config.prefix
        self.pattern = config.file_pattern

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}{self.pattern}"

    def check(self) -> None:
        from batch_pipeline.sources.s3 import S3Source

        try:
            S3Source(self.client, self.bucket, self.prefix).check()
        except SourceUnavailableError as error:  # the setting lives under tickets.source
            raise SourceUnavailableError(
                str(error).replace("source.", "tickets.source.", 1), error.transient
            ) from None

    def has_day(self, day: date) -> bool:
        return self.day_changed_at(day) is not None

    def day_changed_at(self, day: date) -> float | None:
        from botocore.exceptions import ClientError

        key = self.prefix + self.pattern.format(day=day.isoformat())
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError:
            return None
        return head["LastModified"].timestamp() if head.get("ContentLength") else None

    def read_day(self, day: date) -> Iterator[dict]:
        from botocore.exceptions import ClientError

        key = self.prefix + self.pattern.format(day=day.isoformat())
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise ExportMissingError(
                    f"no ticket export for {day}: s3://{self.bucket}/{key} does not exist"
                ) from None
            raise SourceUnavailableError(
                f"cannot read s3://{self.bucket}/{key}: {error}", is_transient(error)
            ) from None
        if not response.get("ContentLength"):
            raise _empty_export(day, f"s3://{self.bucket}/{key}")
        yield from _jsonl_rows(response["Body"].iter_lines())


class SqlExport(TicketExport):
    def __init__(self, config: TicketSqlExport, timezone: str) -> None:
        import sqlalchemy as sa

        self.config = config
        self.timezone = timezone
        self.engine = sa.create_engine(config.resolved_url(), pool_pre_ping=True)
        self._table = None

    def describe(self) -> str:
        from batch_pipeline.sources.sql import safe_url

        return f"{safe_url(self.config.resolved_url())} {self.config.table}"

    def _columns(self) -> dict[str, str]:
        c = self.config
        named = {
            "id": c.id_column,
            "created_at": c.created_at_column,
            "subject": c.subject_column,
            "body": c.body_column,
            "channel": c.channel_column,
            "label": c.label_column,
        }
        return {field: column for field, column in named.items() if column}

    def table(self):  # noqa: ANN201
        from batch_pipeline.sources.sql import reflect_table

        if self._table is None:
            self._table = reflect_table(
                self.engine, self.config.table, "tickets.source.table", self.describe()
            )
        return self._table

    def check(self) -> None:
        from batch_pipeline.sources.sql import check_columns

        configured = [
            (f"tickets.source.{field}_column", column) for field, column in self._columns().items()
        ]
        check_columns(self.table().c.keys(), configured, self.describe())

    def _in_day(self, day: date):  # noqa: ANN202
        """The condition on `created_at` that selects the day's rows."""
        created = self.table().c[self.config.created_at_column]
        start, end = day_bounds(day, self.timezone)
        if not getattr(created.type, "timezone", False):  # a naive column holds UTC
            start, end = (t.astimezone(ZoneInfo("UTC")).replace(tzinfo=None) for t in (start, end))
        return (created >= start) & (created < end)

    def day_row_count(self, day: date) -> int | None:
        import sqlalchemy as sa

        query = sa.select(sa.func.count()).select_from(self.table()).where(self._in_day(day))
        try:
            with self.engine.connect() as conn:
                return int(conn.execute(query).scalar_one())
        except (sa.exc.SQLAlchemyError, OSError) as error:
            raise SourceUnavailableError(
                f"cannot count {day}'s tickets in {self.describe()}: {type(error).__name__}",
                is_transient(error),
            ) from None

    def read_day(self, day: date) -> Iterator[dict]:
        import sqlalchemy as sa

        table = self.table()
        columns = self._columns()
        query = (
            sa.select(*(table.c[column].label(field) for field, column in columns.items()))
            .where(self._in_day(day))
            .order_by(table.c[columns["id"]])
        )
        with self.engine.connect() as conn:
            result = conn.execution_options(stream_results=True).execute(query)
            for row in result:
                values = dict(row._mapping)
                if isinstance(values.get("created_at"), datetime):
                    stamp = values["created_at"]
                    values["created_at"] = stamp.isoformat()
                values["id"] = str(values["id"])
                yield values


def make_export(
    config: TicketExportConfig, timezone: str, s3_client: S3ClientFactory | None = None
) -> TicketExport:
    """The reader for `tickets.source`; an S3 export's client from `s3_client`, as every
    product's S3 sources (None: boto3's defaults and `BATCH_PIPELINE_S3_*`)."""
    if isinstance(config, TicketFolderExport):
        return FolderExport(config)
    if isinstance(config, TicketS3Export):
        from batch_pipeline.sources import default_s3_client

        return S3Export(config, (s3_client or default_s3_client)(config))
    if isinstance(config, TicketSqlExport):
        return SqlExport(config, timezone)
    raise TypeError(f"unsupported ticket export kind {config.kind!r}")
