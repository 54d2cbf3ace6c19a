"""The resources a sensor names, and no more: Dagster builds every resource a sensor names on
every tick, and the S3 resource builds a boto3 client (about 0.1 s), so only a sensor that
reads S3 names it."""

from collections.abc import Callable

import dagster as dg
from dagster_aws.s3 import S3Resource

from resources.pipeline import PipelineResource

Evaluate = Callable[
    [dg.SensorEvaluationContext, PipelineResource, S3Resource | None], dg.SensorResult
]


def sensor_function(evaluate: Evaluate, reads_s3: bool) -> Callable[..., dg.SensorResult]:
    """A sensor function for `dg.sensor` that names `pipeline`, and `s3` only if `reads_s3`
    (`evaluate` gets None for it otherwise)."""
    if reads_s3:

        def with_s3(
            context: dg.SensorEvaluationContext, pipeline: PipelineResource, s3: S3Resource
        ) -> dg.SensorResult:
            return evaluate(context, pipeline, s3)

        return with_s3

    def without_s3(
        context: dg.SensorEvaluationContext, pipeline: PipelineResource
    ) -> dg.SensorResult:
        return evaluate(context, pipeline, None)

    return without_s3
