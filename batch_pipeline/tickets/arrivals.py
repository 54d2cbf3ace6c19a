"""Late and replaced ticket exports: which days the export sensor launches.

The daily schedule classifies the day that just ended at `tickets.schedule_hour`. An export
that arrives after that (the scheduled run failed with "no ticket export for D"), or a day's
file replaced later (a corrected export), is the export sensor's: a day is launched when its
export file is newer than the start of its newest landed run under the current generation,
from `GRACE` after the schedule's own time for the day (so a scheduled run has started by then;
the sensor also leaves alone a day with a run in flight). Only folder and S3 exports have file
times; a SQL export is left to the schedule.

Pure apart from the export's file times and the tracking store; `now` is handed in.
"""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from batch_pipeline.config import TicketsConfig
from batch_pipeline.tickets.pipeline import TicketProduct

GRACE = timedelta(minutes=10)  # after the schedule's time, before a day is the sensor's


@dataclass(frozen=True)
class DayArrival:
    """A day to classify again, because of its export file."""

    day: str
    changed_at: float  # the export file's time (epoch seconds)
    last_run_started_at: float | None  # the newest landed run's start; None: never landed

    @property
    def run_key(self) -> str:
        """Stable per day and file version: a tick that sees the same file asks again for
        the same run, which Dagster launches once."""
        return f"{self.day}@{self.changed_at:.3f}"

    @property
    def reason(self) -> str:
        stamp = datetime.fromtimestamp(self.changed_at, ZoneInfo("UTC")).strftime("%H:%M:%SZ")
        if self.last_run_started_at is None:
            return f"{self.day}: its export arrived at {stamp}, after the schedule, and never ran"
        return f"{self.day}: its export was replaced at {stamp}, after its last run started"


def schedule_time(day: date, settings: TicketsConfig) -> datetime:
    """When the daily schedule runs `day`: the next day at `schedule_hour` in the tickets'
    time zone (at midnight when the schedule is off, as nothing else would run the day)."""
    hour = settings.schedule_hour if settings.schedule_enabled else 0
    return datetime.combine(day + timedelta(days=1), time(hour), ZoneInfo(settings.timezone))


def day_arrivals(product: TicketProduct, now: datetime) -> list[DayArrival]:
    """The newest `arrivals.lookback_days` days at least `GRACE` past their schedule time
    whose export file is newer than their newest landed run's start, oldest first."""
    settings = product.settings
    today = now.astimezone(ZoneInfo(settings.timezone)).date()
    days = [
        day
        for day in product.partition_days(today)
        if schedule_time(date.fromisoformat(day), settings) + GRACE <= now
    ][-settings.arrivals.lookback_days :]
    found = []
    for day in days:
        changed_at = product.export.day_changed_at(date.fromisoformat(day))
        if changed_at is None:
            continue
        runs = product.tracking.partition_runs([day], 1, product.index)
        started = runs[0]["started_at"] if runs else None
        if started is None or started < changed_at:
            found.append(DayArrival(day, changed_at, started))
    return found
