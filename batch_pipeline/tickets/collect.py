"""Ticket stage 1, collect: the day's export, every row checked, into one Parquet file.

A row with no id, no body, a `created_at` that is not a date, or an id already seen that day
is kept in the file as `failed`, with its reason; the day's other tickets go on. Each failure
is recorded against `<day>/<ticket id>` when the day lands.
"""

import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa

from batch_pipeline.state.staging import StagePath, StageWriter, stamped_collect_schema
from batch_pipeline.state.tracking import FailureRecord
from batch_pipeline.tickets import TICKET_COLLECT
from batch_pipeline.tickets.exports import INVALID_JSON, INVALID_UTF8, TicketExport

OK, FAILED = "ok", "failed"

TICKETS_SCHEMA = pa.schema(
    [
        pa.field("ticket_id", pa.string(), nullable=False),
        pa.field("day", pa.string(), nullable=False),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
        pa.field("subject", pa.string()),
        pa.field("body", pa.string()),
        pa.field("channel", pa.string()),
        pa.field("label", pa.string()),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error_reason", pa.string()),
        pa.field("error_message", pa.string()),
    ]
)


def failure_key(day: str, ticket_id: str) -> str:
    """The id a ticket's failure is recorded under: ticket ids need only be unique per day."""
    return f"{day}/{ticket_id}"


def parse_created_at(value: object) -> datetime | None:
    """An ISO 8601 time (a trailing Z allowed; naive means UTC), or None."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def check_row(row: dict, seen: set[str]) -> tuple[str, str] | None:
    """Why a row cannot be classified (reason, message), or None."""
    if INVALID_UTF8 in row:
        return "invalid_utf8", str(row[INVALID_UTF8])
    if INVALID_JSON in row:
        return "invalid_json", str(row[INVALID_JSON])
    ticket_id = str(row.get("id") or "").strip()
    if not ticket_id:
        return "missing_id", "the row has no id"
    if ticket_id in seen:
        return "duplicate_id", f"a second row with id {ticket_id!r}; the first one was kept"
    if not str(row.get("body") or "").strip():
        return "missing_body", "the ticket has no body"
    if parse_created_at(row.get("created_at")) is None:
        return "invalid_date", f"created_at {row.get('created_at')!r} is not an ISO 8601 time"
    return None


@dataclass
class TicketCollectSummary:
    tickets: int = 0
    failed: int = 0
    failure_reasons: dict[str, int] = field(default_factory=dict)
    source: str = ""

    def metadata(self) -> dict[str, object]:
        return {
            "tickets": self.tickets,
            "tickets_failed": self.failed,
            **{f"failed_{reason}": n for reason, n in sorted(self.failure_reasons.items())},
            "export": self.source,
        }


def collect_tickets(export: TicketExport, day: date, out: StagePath | Path) -> TicketCollectSummary:
    """Read the day's export and write every row, checked, to `out`."""
    started = time.perf_counter()
    summary = TicketCollectSummary(source=export.describe())
    seen: set[str] = set()
    key = day.isoformat()
    with StageWriter(out, stamped_collect_schema(TICKETS_SCHEMA), started) as writer:
        for n, row in enumerate(export.read_day(day), start=1):
            problem = check_row(row, seen)
            ticket_id = str(row.get("id") or "").strip() or f"row-{n}"
            if problem is None:
                seen.add(ticket_id)
                summary.tickets += 1
            else:
                summary.failed += 1
                summary.failure_reasons[problem[0]] = summary.failure_reasons.get(problem[0], 0) + 1
            writer.write(
                {
                    "ticket_id": ticket_id,
                    "day": key,
                    "created_at": parse_created_at(row.get("created_at")),
                    "subject": _text(row.get("subject")),
                    "body": _text(row.get("body")),
                    "channel": _text(row.get("channel")),
                    "label": _text(row.get("label")),
                    "status": FAILED if problem else OK,
                    "error_reason": problem[0] if problem else None,
                    "error_message": problem[1] if problem else None,
                }
            )
    return summary


def collected_failures(rows: pa.Table) -> list[FailureRecord]:
    """The failed rows of a collected file, as tracking records them."""
    failed = rows.filter(pa.compute.equal(rows["status"], FAILED)).to_pylist()
    return [
        FailureRecord(
            doc_id=failure_key(row["day"], row["ticket_id"]),
            stage=TICKET_COLLECT.name,
            reason=row["error_reason"],
            error_class="BadTicketRow",
            message=row["error_message"] or "",
        )
        for row in failed
    ]
