"""The document briefs' Dagster definitions: their stages on the collections' partitions (the
collections' job runs them after the partition's collect), their own job, and the sensor
that collects a provider's finished batches with it."""

import dagster as dg

from assets.document_briefs import build_brief_assets, build_brief_job
from assets.namespace import Namespace
from assets.partitions import collection_partitions
from batch_pipeline.config import PipelineConfig
from batch_pipeline.names import briefs_product_name
from sensors.provider_batches import build_provider_batch_sensor


def brief_definitions(config: PipelineConfig, namespace: Namespace) -> dg.Definitions:
    """The briefs of every collection with `briefs:`, their job and the provider-batch
    sensor, named in `namespace`."""
    assets = build_brief_assets(collection_partitions(config), namespace)
    job = build_brief_job(assets, namespace)
    briefs = {briefs_product_name(c.name) for c in config.collections if c.briefs is not None}
    sensor = build_provider_batch_sensor(job, config.partition_keys(), briefs, namespace=namespace)
    return dg.Definitions(assets=assets, jobs=[job], sensors=[sensor])
