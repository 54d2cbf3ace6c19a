"""The ticket intent job, and its daily schedule: yesterday's partition at `schedule_hour`."""

import dagster as dg

from assets.ticket_intents import TICKETS_GROUP
from batch_pipeline.config import PipelineConfig

TICKET_JOB = "ticket_intents_job"
TICKET_SCHEDULE = "ticket_intents_daily"


def build_ticket_job():  # noqa: ANN201
    """The ticket group's five stages; its daily partitions come from the assets."""
    return dg.define_asset_job(
        TICKET_JOB,
        selection=dg.AssetSelection.groups(TICKETS_GROUP),
        description="Collect, prepare, plan, execute and land one day of tickets; then "
        "review the taxonomy generation.",
    )


def build_ticket_schedule(config: PipelineConfig, job) -> dg.ScheduleDefinition:  # noqa: ANN001
    """At `tickets.schedule_hour`:00 in `tickets.timezone`, the day that just ended."""
    settings = config.tickets
    return dg.build_schedule_from_partitioned_job(
        job,
        name=TICKET_SCHEDULE,
        hour_of_day=settings.schedule_hour,
        minute_of_hour=0,
        description=f"Classify yesterday's tickets at {settings.schedule_hour:02d}:00 "
        f"{settings.timezone}.",
        default_status=dg.DefaultScheduleStatus.RUNNING
        if settings.schedule_enabled
        else dg.DefaultScheduleStatus.STOPPED,
    )
