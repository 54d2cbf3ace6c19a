"""The provider-batch sensor: starts the run that collects a partition's briefs once every
batch it handed to a Batch API (the `openai-batch` executor) has finished there.

A provider's batch can take hours, so the generating step submits and returns; this sensor
asks the provider for each batch's status every `minimum_interval_seconds`, and requests one
run of the briefs per partition whose batches are all done. The run's execute collects them
(submitting nothing new while any is in flight), and its land lands the briefs. The run key
names the batches, so a partition's batches are collected by one run however many ticks see
them finished; the run's tags name the run that submitted them.
"""

import hashlib

import dagster as dg

from batch_pipeline.executors.batch_api import ProviderBatchError, collectable
from batch_pipeline.names import generation_product
from resources.generation import GenerationResource
from resources.pipeline import PipelineResource

PROVIDER_BATCHES_SENSOR = "provider_batches_sensor"
SUBMITTED_BY = "batch_pipeline/submitted_by"
POLL_SECONDS = 60


def _digest(batch_ids: tuple[str, ...]) -> str:
    return hashlib.sha1("+".join(batch_ids).encode()).hexdigest()[:16]


def build_provider_batch_sensor(
    job,  # noqa: ANN001
    partition_keys: list[str],
    products: set[str],
) -> dg.SensorDefinition:
    """The sensor over `job` (the briefs' job), for the batches of `products`' generations
    over the Dagster partitions `partition_keys` (a batch a CLI run submitted for a whole
    sharded collection is the next CLI run's; another product's batches, the next run of
    that product's)."""
    known = set(partition_keys)

    @dg.sensor(
        name=PROVIDER_BATCHES_SENSOR,
        job=job,
        minimum_interval_seconds=POLL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts the run that collects a partition's briefs once every batch the "
        f"openai-batch executor submitted for it has finished at the provider (polled every "
        f"{POLL_SECONDS} s; nothing is asked of the provider while no batch is in flight).",
    )
    def provider_batches_sensor(
        context: dg.SensorEvaluationContext,
        pipeline: PipelineResource,
        generation: GenerationResource,
    ) -> dg.SensorResult:
        waiting = [
            b
            for b in pipeline.product_env().tracking.uncollected_provider_batches()
            if b.partition in known and generation_product(b.generation) in products
        ]
        if not waiting:
            return dg.SensorResult(skip_reason=dg.SkipReason("no provider batch in flight"))
        api = generation.batch_api()
        if api is None:
            return dg.SensorResult(
                skip_reason=dg.SkipReason(
                    f"{len(waiting)} provider batches in flight, but the generation resource "
                    "has no api_base to ask about them"
                )
            )
        try:
            ready = collectable(api, waiting)
        except ProviderBatchError as error:  # holds no key
            return dg.SensorResult(skip_reason=dg.SkipReason(f"Batch API unavailable: {error}"))
        if not ready:
            return dg.SensorResult(
                skip_reason=dg.SkipReason(f"{len(waiting)} provider batches still running")
            )
        for found in ready:
            context.log.info(
                f"{found.partition}: {len(found.batch_ids)} batches finished; collecting them"
            )
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"provider-batches:{found.partition}:{_digest(found.batch_ids)}",
                    partition_key=found.partition,
                    tags={SUBMITTED_BY: found.submitted_by},
                )
                for found in ready
            ]
        )

    return provider_batches_sensor
