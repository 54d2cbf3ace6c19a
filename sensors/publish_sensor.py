"""Document-publish sensors: one per collection, turning source changes into targeted runs."""

import time

import dagster as dg
from dagster_aws.s3 import S3Resource

from assets.namespace import SAMPLE, Namespace
from batch_pipeline.config import PipelineConfig, S3SourceConfig
from batch_pipeline.stages import COLLECT
from batch_pipeline.triggers.publish import (
    TICK_SECONDS,
    StateSnapshots,
    evaluate_publish,
    partition_runs,
    skip_without_looking,
)
from batch_pipeline.triggers.tags import publish_tags
from resources.pipeline import PipelineResource
from sensors.default_status import sensor_status
from sensors.resource_params import build_sensor


def publish_sensor_name(collection: str, namespace: Namespace = SAMPLE) -> str:
    return namespace.name(f"{collection}_publish_sensor")


def build_publish_sensor(
    collection: str,
    config: PipelineConfig,
    job,  # noqa: ANN001 - an asset job
    namespace: Namespace = SAMPLE,
) -> dg.SensorDefinition:
    settings = config.sensor
    collection_config = config.collection(collection)

    def evaluate(
        context: dg.SensorEvaluationContext, pipeline: PipelineResource, s3: S3Resource | None
    ) -> dg.SensorResult:
        now = time.time()
        quiet = skip_without_looking(context.cursor, now, settings.interval_seconds)
        if quiet:  # decided from the cursor alone: the source is not touched
            return dg.SensorResult(skip_reason=dg.SkipReason(quiet))
        documents = pipeline.product_env(s3).documents_for(collection)
        decision = evaluate_publish(
            collection,
            documents.collection_source,
            context.cursor,
            now=now,
            window_seconds=settings.window_seconds,
            max_docs=settings.max_docs_per_run,
            snapshots=StateSnapshots(documents.staging.sensor_state(collection)),
            landed=lambda: documents.landed_versions(),
        )
        if decision.cursor_reset:
            context.log.warning(
                "unreadable cursor or lost state file: starting over from what tracking has landed"
            )
        documents.record_pending(decision.pending_changes)
        run_requests = [
            dg.RunRequest(
                run_key=request.run_key,
                partition_key=request.partition,
                run_config={
                    "ops": {
                        namespace.name(COLLECT.asset): {
                            "config": {
                                "changed_doc_ids": request.changed_doc_ids,
                                "deleted_doc_ids": request.deleted_doc_ids,
                            }
                        }
                    }
                },
                tags=publish_tags(request.full),
            )
            for run in decision.runs
            for request in partition_runs(run, collection_config)
        ]
        if run_requests:
            return dg.SensorResult(run_requests=run_requests, cursor=decision.cursor)
        return dg.SensorResult(
            skip_reason=dg.SkipReason(decision.skip_reason), cursor=decision.cursor
        )

    return build_sensor(
        evaluate,
        namespace,
        "s3" if isinstance(collection_config.source, S3SourceConfig) else None,
        name=publish_sensor_name(collection, namespace),
        job=job,
        minimum_interval_seconds=TICK_SECONDS,
        default_status=sensor_status(settings.enabled),
        description=(
            f"Watches collection {collection!r} for added, changed and deleted documents and "
            f"launches a run that embeds only those, batching changes within "
            f"{settings.window_seconds} s (at most {settings.max_docs_per_run} documents a run). "
            f"It looks at the source every {settings.interval_seconds} s and ticks every few "
            f"seconds in between, so that a run starts as soon as its window closes."
        ),
    )
