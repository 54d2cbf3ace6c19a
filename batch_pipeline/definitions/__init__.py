"""The Dagster code location (`dagster dev`, `dagster asset materialize -m ...definitions`):
one `*_definitions(config)` per product kind, named by its declaration, merged at the top.

Partitions come from the collections in `$BATCH_PIPELINE_CONFIG` (default `pipeline.yaml`).
Steps run in-process: the stages of one partition are sequential, and a run then loads the
model and imports torch once instead of once per step. Partitions run as separate runs.
"""

import importlib
import os
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource

from assets.document_briefs import build_brief_assets, build_brief_job, has_briefs
from assets.partitions import collection_partitions
from assets.ticket_intents import build_ticket_assets, ticket_partitions
from assets.vector_index import build_index_assets
from batch_pipeline.config import PipelineConfig, load_config
from batch_pipeline.declaration import ProductKind
from batch_pipeline.products import kinds_for
from batch_pipeline.sources import S3_ENV
from resources import GenerationResource, InferenceResource, PipelineResource
from sensors import build_triggers
from sensors.provider_batches import build_provider_batch_sensor
from sensors.ticket_exports import build_ticket_exports_sensor
from sensors.ticket_schedule import build_ticket_job, build_ticket_schedule


def s3_resource() -> S3Resource:
    """dagster-aws's S3Resource over the same environment the CLI reads (`S3_ENV`), as
    `dg.EnvVar`s; credentials come from the usual AWS variables or profiles."""
    return S3Resource(**{k: dg.EnvVar(v) for k, v in S3_ENV.items() if os.environ.get(v)})


def index_definitions(config: PipelineConfig) -> dg.Definitions:
    """The vector index: its stage assets and generation review on the collections'
    partitions, the embedding job, one publish sensor per collection, the nightly schedule."""
    job, sensors, schedules = build_triggers(config)
    assets = build_index_assets(collection_partitions(config))
    return dg.Definitions(assets=assets, jobs=[job], sensors=sensors, schedules=schedules)


def brief_definitions(config: PipelineConfig) -> dg.Definitions:
    """The document briefs, on the collections' partitions (the embedding job runs them), their
    own job, and the sensor that collects a provider's finished batches with it."""
    if not has_briefs(config):
        return dg.Definitions()
    partitions = collection_partitions(config)
    job = build_brief_job()
    sensor = build_provider_batch_sensor(job, config.partition_keys())
    return dg.Definitions(assets=build_brief_assets(partitions), jobs=[job], sensors=[sensor])


def ticket_definitions(config: PipelineConfig) -> dg.Definitions:
    """The ticket intents, on daily partitions: their job, schedule and export sensor."""
    if config.tickets is None:
        return dg.Definitions()
    job = build_ticket_job()
    return dg.Definitions(
        assets=build_ticket_assets(ticket_partitions(config)),
        jobs=[job],
        schedules=[build_ticket_schedule(config, job)],
        sensors=[build_ticket_exports_sensor(config, job)],
    )


def product_definitions(kind: ProductKind, config: PipelineConfig) -> dg.Definitions:
    """A kind's Dagster definitions for this configuration, as its declaration names them."""
    module, _, function = kind.definitions.partition(":")
    return getattr(importlib.import_module(module), function)(config)


def build_definitions(config_path: str | Path | None = None) -> dg.Definitions:
    """Every product kind's definitions (`products.kinds_for`: the built-in kinds and those
    the configuration declares), merged, with the shared resources and the in-process
    executor."""
    config = load_config(config_path)
    shared = dg.Definitions(
        resources={
            "pipeline": PipelineResource(
                config_path=str(config_path) if config_path is not None else None
            ),
            "inference": InferenceResource(),
            "generation": GenerationResource(),  # chat models on vLLM; the engine starts on use
            "s3": s3_resource(),
        },
        executor=dg.in_process_executor,
    )
    kinds = kinds_for(config)
    return dg.Definitions.merge(*(product_definitions(kind, config) for kind in kinds), shared)


defs = build_definitions()
