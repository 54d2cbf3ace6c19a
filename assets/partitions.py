"""One static partition per configured collection, and the stage assets' shared labels."""

import dagster as dg

from batch_pipeline.config import PipelineConfig

GROUP_NAME = "embedding_pipeline"
OWNERS = ["team:search-platform"]
GPU_POOL = "gpu"  # one run at a time on a GPU; set its limit with `dagster instance concurrency`

# Transient failures (S3, SQL, LanceDB commit conflicts) are retried with backoff.
TRANSIENT_RETRY = dg.RetryPolicy(
    max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


def collection_partitions(config: PipelineConfig) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(config.partition_keys())
