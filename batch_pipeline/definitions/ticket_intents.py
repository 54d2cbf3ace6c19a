"""The ticket intents' Dagster definitions: their stage assets on daily partitions, their job,
the daily schedule (yesterday's partition at `tickets.schedule_hour`), the export sensor,
which launches a day whose export arrived after the schedule, was replaced after the day ran,
or (a SQL table) gained or lost tickets since, and, with a cascade through a provider
(`tickets.cascade.executor: openai-batch`), the sensor that starts the day's run collecting
the chat model's answers once the provider has finished its batches."""

from datetime import UTC, datetime

import dagster as dg
from dagster_aws.s3 import S3Resource

from assets.namespace import SAMPLE, Namespace
from assets.ticket_intents import build_ticket_assets, ticket_partitions
from batch_pipeline.config import PipelineConfig, TicketS3Export
from batch_pipeline.executors.registry import GENERATE, capabilities
from batch_pipeline.names import generation_product
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.tickets.arrivals import day_states, skip_reason
from batch_pipeline.tickets.cascade.chat import cascade_partition
from batch_pipeline.tickets.kind import open_tickets, targets
from resources.pipeline import PipelineResource
from sensors.default_status import schedule_status, sensor_status
from sensors.provider_batches import POLL_SECONDS, collecting_runs
from sensors.resource_params import build_sensor

TICKET_JOB = "ticket_intents_job"
TICKET_SCHEDULE = "ticket_intents_daily"
TICKET_EXPORTS_SENSOR = "ticket_exports_sensor"
CASCADE_BATCHES_SENSOR = "ticket_cascade_batches_sensor"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def build_ticket_job(  # noqa: ANN201 - an asset job
    assets: list[dg.AssetsDefinition], namespace: Namespace = SAMPLE
):
    """The ticket intents' five stage `assets`, named in `namespace`; its daily partitions
    come from the assets."""
    return dg.define_asset_job(
        namespace.name(TICKET_JOB),
        selection=dg.AssetSelection.assets(*assets),
        description="Collect, prepare, plan, execute and land one day of tickets; then "
        "review the taxonomy generation.",
    )


def build_ticket_schedule(
    config: PipelineConfig,
    job,  # noqa: ANN001 - an asset job
    namespace: Namespace = SAMPLE,
) -> dg.ScheduleDefinition:
    """At `tickets.schedule_hour`:00 in `tickets.timezone`, the day that just ended."""
    settings = config.tickets
    return dg.build_schedule_from_partitioned_job(
        job,
        name=namespace.name(TICKET_SCHEDULE),
        hour_of_day=settings.schedule_hour,
        minute_of_hour=0,
        description=f"Classify yesterday's tickets at {settings.schedule_hour:02d}:00 "
        f"{settings.timezone}.",
        default_status=schedule_status(settings.schedule_enabled),
    )


def build_ticket_exports_sensor(
    config: PipelineConfig,
    job,  # noqa: ANN001 - an asset job
    namespace: Namespace = SAMPLE,
) -> dg.SensorDefinition:
    settings = config.tickets
    arrivals = settings.arrivals

    def evaluate(
        context: dg.SensorEvaluationContext, pipeline: PipelineResource, s3: S3Resource | None
    ) -> dg.SensorResult:
        in_flight = {
            run.tags.get("dagster/partition")
            for run in context.instance.get_runs(
                dg.RunsFilter(job_name=job.name, statuses=IN_FLIGHT), limit=100
            )
        }
        try:
            tickets = open_tickets(pipeline.product_env(s3), targets(pipeline.config)[0])
            states = day_states(tickets.product, datetime.now(UTC))
        except SourceUnavailableError as error:
            return dg.SensorResult(skip_reason=dg.SkipReason(f"export unavailable: {error}"))
        found = [s.arrival for s in states if s.arrival is not None and s.day not in in_flight]
        if not found:
            reason = skip_reason(states, in_flight, arrivals.lookback_days)
            return dg.SensorResult(skip_reason=dg.SkipReason(reason))
        for arrival in found:
            context.log.info(arrival.reason)
        return dg.SensorResult(
            run_requests=[dg.RunRequest(run_key=a.run_key, partition_key=a.day) for a in found]
        )

    return build_sensor(
        evaluate,
        namespace,
        "s3" if isinstance(settings.source, TicketS3Export) else None,
        name=namespace.name(TICKET_EXPORTS_SENSOR),
        job=job,
        minimum_interval_seconds=arrivals.interval_seconds,
        default_status=sensor_status(arrivals.enabled),
        description=(
            f"Launches a day of ticket_intents whose export arrived after the daily schedule "
            f"({settings.schedule_hour:02d}:00 {settings.timezone}), or changed after the day "
            f"ran; looks at the newest {arrivals.lookback_days} days every "
            f"{arrivals.interval_seconds} s."
        ),
    )


def build_cascade_batches_sensor(
    config: PipelineConfig,
    job,  # noqa: ANN001 - an asset job
    namespace: Namespace = SAMPLE,
) -> dg.SensorDefinition:
    """Once every batch the cascade handed the provider for a day (or for a generation's
    held-out or labelled tickets) has finished there, one run of the day that collects them
    (`GenerationCascade.collecting_day`); the run key names the batches."""
    settings = config.tickets

    def evaluate(
        context: dg.SensorEvaluationContext, pipeline: PipelineResource, s3: S3Resource | None
    ) -> dg.SensorResult:
        env = pipeline.product_env(s3)
        waiting = [
            b
            for b in env.tracking.uncollected_provider_batches()
            if generation_product(b.generation) == settings.name and cascade_partition(b.partition)
        ]
        product = None if not waiting else open_tickets(env, targets(pipeline.config)[0]).product
        return collecting_runs(
            context,
            waiting,
            lambda: product.escalation.batch_api,
            key_prefix="cascade-batches",
            what="cascade",
            run_of=lambda found: product.cascades.collecting_day(found.generation, found.partition),
        )

    return build_sensor(
        evaluate,
        namespace,
        "s3" if isinstance(settings.source, TicketS3Export) else None,
        name=namespace.name(CASCADE_BATCHES_SENSOR),
        job=job,
        minimum_interval_seconds=POLL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts the run of a day that collects the ticket cascade's answers once "
        "every batch the chat model's provider took for it has finished (polled every "
        f"{POLL_SECONDS} s; nothing is asked of the provider while no batch is in flight).",
    )


def ticket_definitions(config: PipelineConfig, namespace: Namespace) -> dg.Definitions:
    """The ticket intents, on daily partitions: their job, schedule and export sensor, and
    the cascade's provider-batch sensor where it asks a provider, named in `namespace`."""
    assets = build_ticket_assets(ticket_partitions(config), namespace)
    job = build_ticket_job(assets, namespace)
    cascade = config.tickets.cascade
    sensors = [build_ticket_exports_sensor(config, job, namespace)]
    if cascade is not None and capabilities(GENERATE, cascade.executor).provider_batches:
        sensors.append(build_cascade_batches_sensor(config, job, namespace))
    return dg.Definitions(
        assets=assets,
        jobs=[job],
        schedules=[build_ticket_schedule(config, job, namespace)],
        sensors=sensors,
    )
