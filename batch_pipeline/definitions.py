"""The Dagster code location (`dagster dev`, `dagster asset materialize -m ...definitions`).

Partitions come from the collections in `$BATCH_PIPELINE_CONFIG` (default `pipeline.yaml`).
Steps run in-process: the stages of one partition are sequential, and a run then loads the
model and imports torch once instead of once per step. Partitions run as separate runs.
"""

from pathlib import Path

import dagster as dg

from assets import build_stage_assets
from assets.partitions import collection_partitions
from batch_pipeline.config import load_config
from resources import InferenceResource, PipelineResource


def build_definitions(config_path: str | Path | None = None) -> dg.Definitions:
    config = load_config(config_path)
    partitions = collection_partitions(config)
    return dg.Definitions(
        assets=build_stage_assets(partitions),
        resources={
            "pipeline": PipelineResource(
                config_path=str(config_path) if config_path is not None else None
            ),
            "inference": InferenceResource(),
        },
        executor=dg.in_process_executor,
    )


defs = build_definitions()
