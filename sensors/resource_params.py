"""A sensor over the resources it names, and no more: Dagster builds every resource a sensor
names on every tick, and the S3 resource builds a boto3 client (about 0.1 s), so only a sensor
that reads S3 names it. The pipeline resource is its namespace's (`assets.namespace`)."""

from collections.abc import Callable
from typing import Any

import dagster as dg

from assets.namespace import Namespace, pipeline_of
from resources.pipeline import PipelineResource

Evaluate = Callable[[dg.SensorEvaluationContext, PipelineResource, Any], dg.SensorResult]


def build_sensor(
    evaluate: Evaluate, namespace: Namespace, other: str | None = None, **sensor: Any
) -> dg.SensorDefinition:
    """`dg.sensor(**sensor)` over `evaluate`, which gets the namespace's pipeline resource and
    the resource `other` names (s3, generation, inference; None where `other` is None)."""
    keys = namespace.resource_keys(["pipeline", *([other] if other else [])])

    # a sensor called directly (`sensor(context)`, as tests do) is handed its resources as
    # keywords too, by key; a tick hands the context alone. Both read them from the context.
    def evaluation(context: dg.SensorEvaluationContext, **_by_key: object) -> dg.SensorResult:
        # the resource itself (S3's attribute on the context is the client it makes)
        resource = context.resources.original_resource_dict[other] if other else None
        return evaluate(context, pipeline_of(context), resource)

    return dg.sensor(required_resource_keys=keys, **sensor)(evaluation)
