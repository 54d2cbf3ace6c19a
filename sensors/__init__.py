"""Sensors and schedules that trigger the pipeline, over any product: the collections' job,
its publish sensors and nightly reconciliation, and the provider-batch sensor. A product's
own triggers (the ticket intents' schedule and export sensor) are in its definitions."""

from collections.abc import Sequence

import dagster as dg

from assets.namespace import SAMPLE, Namespace
from batch_pipeline.config import PipelineConfig
from sensors.embedding_job import build_embedding_job
from sensors.nightly_schedule import build_nightly_schedule
from sensors.provider_batches import COLLECTION_BATCHES_SENSOR, build_provider_batch_sensor
from sensors.publish_sensor import build_publish_sensor


def build_triggers(  # noqa: ANN201
    config: PipelineConfig,
    assets: Sequence[dg.AssetsDefinition],
    embedding: set[str],
    namespace: Namespace = SAMPLE,
):
    """The collections' job over `assets` (named in `namespace`), one publish sensor per
    collection, the nightly schedule, and the provider-batch sensor that collects the batches
    of the `embedding` products (those riding the job whose model family embeds: asked
    through the inference resource)."""
    job = build_embedding_job(assets, namespace)
    sensors = [build_publish_sensor(c.name, config, job, namespace) for c in config.collections]
    if embedding:
        keys = config.partition_keys()
        sensors.append(
            build_provider_batch_sensor(
                job, keys, embedding, COLLECTION_BATCHES_SENSOR, "inference", namespace
            )
        )
    return job, sensors, [build_nightly_schedule(config, job, namespace)]
