"""The provider-batch sensors: each starts the run that collects a partition's outputs once
every batch a Batch API took for it (the `openai-batch` executor) has finished there. One
watches the briefs' job (the chat models' batches, asked through the generation resource);
one the collections' job, for the products that ride it and embed (the vector index's
batches, asked through the inference resource).

A provider's batch can take hours, so the executing step submits and returns; a sensor asks
the provider for each batch's status every `minimum_interval_seconds`, and requests one run
per partition whose batches are all done. The run's execute collects them (submitting
nothing new while any is in flight), and its land lands the outputs. The run key names the
batches, so a partition's batches are collected by one run however many ticks see them
finished; the run's tags name the run that submitted them.
"""

import hashlib
from collections.abc import Callable

import dagster as dg

from assets.namespace import SAMPLE, Namespace
from batch_pipeline.executors.batch_api import BatchApiSettings, ProviderBatchError
from batch_pipeline.executors.batch_status import Collectable, collectable
from batch_pipeline.names import generation_product
from batch_pipeline.state.tracking import ProviderBatch
from resources.batch_api import BatchApiResource
from resources.pipeline import PipelineResource
from sensors.resource_params import build_sensor

PROVIDER_BATCHES_SENSOR = "provider_batches_sensor"  # the briefs' job's
COLLECTION_BATCHES_SENSOR = "collection_provider_batches_sensor"  # the collections' job's
SUBMITTED_BY = "batch_pipeline/submitted_by"
POLL_SECONDS = 60


def batches_digest(batch_ids: tuple[str, ...]) -> str:
    """A short, stable name for a set of batches: a run key's."""
    return hashlib.sha1("+".join(batch_ids).encode()).hexdigest()[:16]


def collecting_runs(
    context: dg.SensorEvaluationContext,
    waiting: list[ProviderBatch],
    api_of: Callable[[], BatchApiSettings | None],
    key_prefix: str,
    what: str = "provider",
    no_api: str = "no api_base to ask about them",
    run_of: Callable[[Collectable], str | None] = lambda found: found.partition,
) -> dg.SensorResult:
    """What every provider-batch sensor does with the batches `waiting` for it: skips while
    none is, while the provider cannot be asked (`api_of` gives no address, or it does not
    answer) or while any of a group still runs; otherwise one run request per Dagster
    partition `run_of` names for a finished group (None: no run collects it yet), keyed
    `<key_prefix>:<ledger partition>:<the batches' digest>` and tagged with the run that
    submitted them. `api_of` is called only where a batch waits: a sensor with nothing in
    flight asks nothing of the provider."""
    if not waiting:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"no {what} batch in flight"))
    api = api_of()
    if api is None:
        return dg.SensorResult(
            skip_reason=dg.SkipReason(f"{len(waiting)} {what} batches in flight, but {no_api}")
        )
    try:
        ready = collectable(api, waiting)
    except ProviderBatchError as error:  # holds no key
        return dg.SensorResult(skip_reason=dg.SkipReason(f"Batch API unavailable: {error}"))
    requests: dict[str, dg.RunRequest] = {}
    for found in ready:
        partition = run_of(found)
        if partition is None or partition in requests:
            continue
        ran_by = "" if partition == found.partition else f"; the run of {partition} collects them"
        context.log.info(f"{found.partition}: {len(found.batch_ids)} batches finished{ran_by}")
        requests[partition] = dg.RunRequest(
            run_key=f"{key_prefix}:{found.partition}:{batches_digest(found.batch_ids)}",
            partition_key=partition,
            tags={SUBMITTED_BY: found.submitted_by},
        )
    if not requests:
        return dg.SensorResult(
            skip_reason=dg.SkipReason(f"{len(waiting)} {what} batches still running")
        )
    return dg.SensorResult(run_requests=list(requests.values()))


def build_provider_batch_sensor(
    job,  # noqa: ANN001
    partition_keys: list[str],
    products: set[str],
    name: str = PROVIDER_BATCHES_SENSOR,
    resource_key: str = "generation",
    namespace: Namespace = SAMPLE,
) -> dg.SensorDefinition:
    """The sensor over `job`, for the batches of `products`' generations over the Dagster
    partitions `partition_keys`, asking the provider that the resource `resource_key` (a
    `BatchApiResource`: generation, inference) names (a batch a CLI run submitted for
    a whole sharded collection is the next CLI run's; another product's batches, the next
    run of that product's)."""
    if resource_key not in ("generation", "inference"):
        raise ValueError(f"no Batch API resource {resource_key!r}: generation or inference")
    known = set(partition_keys)

    def evaluate(
        context: dg.SensorEvaluationContext,
        pipeline: PipelineResource,
        resource: BatchApiResource,
    ) -> dg.SensorResult:
        waiting = [
            b
            for b in pipeline.product_env().tracking.uncollected_provider_batches()
            if b.partition in known and generation_product(b.generation) in products
        ]
        return collecting_runs(
            context,
            waiting,
            lambda: resource.batch_api(),
            key_prefix="provider-batches",
            no_api=f"the {resource_key} resource has no api_base to ask about them",
        )

    return build_sensor(
        evaluate,
        namespace,
        resource_key,
        name=namespace.name(name),
        job=job,
        minimum_interval_seconds=POLL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Starts the {job.name} run that collects a partition's outputs once every "
        "batch the openai-batch executor submitted for it has finished at the provider "
        f"(polled every {POLL_SECONDS} s; nothing is asked of the provider while no batch is "
        f"in flight). Products: {', '.join(sorted(products))}.",
    )
