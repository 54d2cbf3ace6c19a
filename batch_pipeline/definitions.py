"""The Dagster code location (`dagster dev`, `dagster asset materialize -m ...definitions`).

Partitions come from the collections in `$BATCH_PIPELINE_CONFIG` (default `pipeline.yaml`).
Steps run in-process: the stages of one partition are sequential, and a run then loads the
model and imports torch once instead of once per step. Partitions run as separate runs.
"""

import os
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource

from assets import build_stage_assets
from assets.document_briefs import build_brief_assets, has_briefs
from assets.partitions import collection_partitions
from assets.ticket_intents import build_ticket_assets, ticket_partitions
from batch_pipeline.config import load_config
from batch_pipeline.sources import S3_ENV
from resources import GenerationResource, InferenceResource, PipelineResource
from sensors import build_triggers
from sensors.ticket_exports import build_ticket_exports_sensor
from sensors.ticket_schedule import build_ticket_job, build_ticket_schedule


def s3_resource() -> S3Resource:
    """dagster-aws's S3Resource over the same environment the CLI reads (`S3_ENV`), as
    `dg.EnvVar`s; credentials come from the usual AWS variables or profiles."""
    return S3Resource(**{k: dg.EnvVar(v) for k, v in S3_ENV.items() if os.environ.get(v)})


def build_definitions(config_path: str | Path | None = None) -> dg.Definitions:
    config = load_config(config_path)
    partitions = collection_partitions(config)
    job, sensors, schedules = build_triggers(config)
    assets, jobs = build_stage_assets(partitions), [job]
    if has_briefs(config):  # the third product, on the collections' partitions
        assets += build_brief_assets(partitions)
    if config.tickets is not None:  # the second product, on daily partitions
        days = ticket_partitions(config)
        ticket_job = build_ticket_job()
        assets += build_ticket_assets(days)
        jobs.append(ticket_job)
        schedules = [*schedules, build_ticket_schedule(config, ticket_job)]
        sensors = [*sensors, build_ticket_exports_sensor(config, ticket_job)]
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        sensors=sensors,
        schedules=schedules,
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


defs = build_definitions()
