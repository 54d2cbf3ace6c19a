"""One static partition per configured collection, and the stage assets' shared labels."""

import dagster as dg

from batch_pipeline.config import PipelineConfig

GROUP_NAME = "embedding_pipeline"
OWNERS = ["team:search-platform"]


def collection_partitions(config: PipelineConfig) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(config.partition_keys())
