"""The nightly schedule: a full reconciliation of every partition, then table maintenance."""

import dagster as dg

from assets.namespace import SAMPLE, Namespace
from batch_pipeline.config import PipelineConfig
from batch_pipeline.triggers.tags import nightly_tags
from sensors.default_status import schedule_status

NIGHTLY_SCHEDULE = "nightly_reconciliation"


def build_nightly_schedule(
    config: PipelineConfig,
    job,  # noqa: ANN001 - an asset job
    namespace: Namespace = SAMPLE,
) -> dg.ScheduleDefinition:
    settings = config.schedule
    partitions = config.partition_keys()

    @dg.schedule(
        name=namespace.name(NIGHTLY_SCHEDULE),
        job=job,
        cron_schedule=settings.cron,
        execution_timezone=settings.timezone,
        default_status=schedule_status(settings.enabled),
        description=(
            "Full reconciliation of every collection: detect deletions, re-embed anything "
            "stale, compact the LanceDB table and clean up old versions."
        ),
    )
    def nightly_reconciliation(context: dg.ScheduleEvaluationContext):  # noqa: ANN202
        stamp = context.scheduled_execution_time.isoformat()
        for partition in partitions:
            yield dg.RunRequest(
                run_key=f"nightly:{partition}:{stamp}",
                partition_key=partition,
                tags=nightly_tags(),
            )

    return nightly_reconciliation
