"""One static partition per configured collection, and the stage assets' shared labels."""

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import dagster as dg

from batch_pipeline.config import PipelineConfig
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.transient import is_transient

P = ParamSpec("P")
R = TypeVar("R")

GROUP_NAME = "embedding_pipeline"
GPU_POOL = "gpu"  # one run at a time on a GPU; set its limit with `dagster instance concurrency`

# Transient failures (S3, SQL, LanceDB commit conflicts) are retried with backoff. An asset
# with this policy is also decorated `@retried_if_transient`: only a transient failure is
# retried, and Terminate is not.
TRANSIENT_RETRY = dg.RetryPolicy(
    max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


class RunTerminated(dg.DagsterExecutionInterruptedError, dg.DagsterError):
    """A step interrupted by a run's termination, raised past its retry policy.

    Dagster turns an interrupt inside a step that has a retry policy into a retry. Under the
    in-process executor that means Terminate is ignored: the step starts again, the other
    steps run, and the run ends in success (dagster-io/dagster#15026; seen here on a briefs
    run). As a `DagsterError` this passes the policy unconverted; as an interrupt it stops
    the executor, and the run ends canceled."""


def retried_if_transient(compute: Callable[P, R]) -> Callable[P, R]:
    """The asset's body under `TRANSIENT_RETRY`'s terms: a transient failure
    (`batch_pipeline.transient`) is raised as it is, for the policy to retry; any other fails
    the step at once (`dg.Failure` with `allow_retries=False`, the error as its cause), since
    it would fail the same way on every try; and a run's termination is raised as
    `RunTerminated`, which stops the run. A `dg.Failure` the body raises keeps its own say."""

    @functools.wraps(compute)
    def body(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return compute(*args, **kwargs)
        except (RunTerminated, dg.Failure, dg.RetryRequested):
            raise
        except dg.DagsterExecutionInterruptedError as interrupt:
            why = f" ({interrupt})" if str(interrupt) else ""
            raise RunTerminated(
                f"the run was terminated{why}: this step stops here and is not retried (its "
                "retry policy is for transient failures)"
            ) from interrupt
        except Exception as error:
            if is_transient(error):
                raise
            raise dg.Failure(
                description=(
                    f"{type(error).__name__}: {error}\n\nNot retried: this is not a transient "
                    "failure (a dropped connection, a timeout, a throttled service, a locked "
                    "database), so it would fail the same way again."
                ),
                allow_retries=False,
            ) from error

    body.retried_if_transient = True  # type: ignore[attr-defined]
    return body


PROGRESS_INTERVAL_SECONDS = 15.0  # how often a long stage logs its progress to the event log


def progress_log(context: dg.AssetExecutionContext) -> ProgressSink:
    """A long stage's progress as lines in the run's event log."""
    return lambda update: context.log.info(update.line())


def collection_partitions(config: PipelineConfig) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(config.partition_keys())


def partition_check(
    name: str,
    asset: dg.AssetKey | str,
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
