"""One static partition per configured collection, and the stage assets' shared labels."""

import warnings

import dagster as dg

from batch_pipeline.config import PipelineConfig
from batch_pipeline.measures.progress import ProgressSink

GROUP_NAME = "embedding_pipeline"
OWNERS = ["team:search-platform"]
GPU_POOL = "gpu"  # one run at a time on a GPU; set its limit with `dagster instance concurrency`

# Transient failures (S3, SQL, LanceDB commit conflicts) are retried with backoff.
TRANSIENT_RETRY = dg.RetryPolicy(
    max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


PROGRESS_INTERVAL_SECONDS = 15.0  # how often a long stage logs its progress to the event log


def progress_log(context: dg.AssetExecutionContext) -> ProgressSink:
    """A long stage's progress as lines in the run's event log."""
    return lambda update: context.log.info(update.line())


def collection_partitions(config: PipelineConfig) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(config.partition_keys())


def partition_check(
    name: str,
    asset: str,
    partitions: dg.PartitionsDefinition,
    description: str,
    blocking: bool = False,
) -> dg.AssetCheckSpec:
    """An asset check evaluated per partition, so the UI shows each partition's result.

    Partitioned checks are a preview feature in Dagster 1.13; its PreviewWarning is silenced
    here, where it is known and wanted, rather than on every load of the code location.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            name,
            asset=asset,
            partitions_def=partitions,
            blocking=blocking,
            description=description,
        )
