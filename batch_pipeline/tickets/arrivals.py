"""Late, replaced and added-to ticket exports: which days the export sensor launches.

The daily schedule classifies the day that just ended at `tickets.schedule_hour`. An export
that arrives after that (the scheduled run failed with "no ticket export for D"), a day's file
replaced later (a corrected export), or tickets added to a day in a SQL table after it ran
are the export sensor's. A day is launched when, since the start of its newest landed run
under the current generation, its export file was written (folder, S3: mtime or
LastModified), or its row count differs from the rows that run read (SQL) - from `GRACE`
after the schedule's own time for the day, so a scheduled run has started by then (the
sensor also leaves alone a day with a run in flight).

Pure apart from the export and the tracking store; `now` is handed in.
"""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from batch_pipeline.config import TicketsConfig
from batch_pipeline.tickets.product import TicketProduct

GRACE = timedelta(minutes=10)  # after the schedule's time, before a day is the sensor's


@dataclass(frozen=True)
class DayArrival:
    """A day to classify again, because of its export."""

    day: str
    changed_at: float | None  # the export file's time (epoch seconds); None for a table
    rows: int | None  # the table's tickets of the day; None for a file
    last_run: dict | None  # the newest landed run of the day (tracking's record); None: never

    @property
    def run_key(self) -> str:
        """Stable per day and export version: a tick that sees the same export asks again
        for the same run, which Dagster launches once."""
        if self.changed_at is not None:
            return f"{self.day}@{self.changed_at:.3f}"
        after = self.last_run["run_id"] if self.last_run else "never"
        return f"{self.day}#{self.rows}@{after}"

    @property
    def reason(self) -> str:
        if self.changed_at is None:
            before = (
                f"{tickets_read(self.last_run)} when it last ran"
                if self.last_run
                else "and it never ran"
            )
            return f"{self.day}: {self.rows} tickets in the table, {before}"
        stamp = datetime.fromtimestamp(self.changed_at, ZoneInfo("UTC")).strftime("%H:%M:%SZ")
        if self.last_run is None:
            return f"{self.day}: its export arrived at {stamp}, after the schedule, and never ran"
        return f"{self.day}: its export was replaced at {stamp}, after its last run started"


def tickets_read(run: dict) -> int | None:
    """The tickets a landed run read from its export (its `attempted` inputs, in tickets, for
    runs recorded before their counts were)."""
    return run["counts"].get("tickets_read", run["attempted"])


def schedule_time(day: date, settings: TicketsConfig) -> datetime:
    """When the daily schedule runs `day`: the next day at `schedule_hour` in the tickets'
    time zone (at midnight when the schedule is off, as nothing else would run the day)."""
    hour = settings.schedule_hour if settings.schedule_enabled else 0
    return datetime.combine(day + timedelta(days=1), time(hour), ZoneInfo(settings.timezone))


RAN, NOT_ARRIVED, NO_TICKETS, RUNNING = "ran", "no export yet", "no tickets", "running"


@dataclass(frozen=True)
class DayState:
    """One of the newest days past the schedule, as the export sensor sees it: to launch
    (`arrival`), or why not (`state`: ran, no export yet, no tickets)."""

    day: str
    state: str
    arrival: DayArrival | None = None


def day_states(product: TicketProduct, now: datetime) -> list[DayState]:
    """The newest `arrivals.lookback_days` days at least `GRACE` past their schedule time,
    oldest first: each one whose export changed since its newest landed run started is to be
    launched; the others say why not. A source that cannot be read raises
    SourceUnavailableError."""
    settings = product.settings
    lookback = settings.arrivals.lookback_days
    today = now.astimezone(ZoneInfo(settings.timezone)).date()
    # yesterday may not be past its schedule yet: one day more than the lookback is enough
    newest = [date.fromisoformat(day) for day in product.partition_days(today)[-lookback - 1 :]]
    days = [day for day in newest if schedule_time(day, settings) + GRACE <= now][-lookback:]
    states = []
    for day in days:
        key = day.isoformat()
        runs = product.tracking.partition_runs([key], 1, product.index)
        last = runs[0] if runs else None
        changed_at = product.export.day_changed_at(day)
        rows = None if changed_at is not None else product.export.day_row_count(day)
        if changed_at is not None:
            arrived = last is None or last["started_at"] < changed_at
            arrival = DayArrival(key, changed_at, None, last) if arrived else None
        elif rows is None:  # a file export whose file is not there (or is empty) yet
            states.append(DayState(key, NOT_ARRIVED))
            continue
        elif last is None and rows == 0:
            states.append(DayState(key, NO_TICKETS))
            continue
        else:
            changed = last is None or rows != tickets_read(last)
            arrival = DayArrival(key, None, rows, last) if changed else None
        states.append(DayState(key, RAN if arrival is None else "to launch", arrival))
    return states


def day_arrivals(product: TicketProduct, now: datetime) -> list[DayArrival]:
    """The days to launch (see `day_states`), oldest first."""
    return [s.arrival for s in day_states(product, now) if s.arrival is not None]


def skip_reason(states: list[DayState], in_flight: set[str], lookback: int) -> str:
    """Why a tick launches nothing, naming the days in each state."""
    by_state: dict[str, list[str]] = {}
    for s in states:
        state = RUNNING if s.day in in_flight else s.state
        by_state.setdefault(state, []).append(s.day)
    if not by_state:
        return f"none of the newest {lookback} days is past its schedule yet"
    parts = [f"{', '.join(days)}: {state}" for state, days in by_state.items()]
    return f"nothing to launch of the newest {lookback} days past the schedule: " + "; ".join(parts)
