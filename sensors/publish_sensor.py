"""Document-publish sensors: one per collection, turning source changes into targeted runs."""

import time

import dagster as dg
from dagster_aws.s3 import S3Resource

from batch_pipeline.config import PipelineConfig
from batch_pipeline.fingerprint import shard_of
from batch_pipeline.publish import PlannedRun, StateSnapshots, evaluate_publish
from resources.pipeline import PipelineResource

TRIGGER_TAG = "batch_pipeline/trigger"


def split_by_shard(run: PlannedRun, shards: list[str]) -> list[tuple[str, list[str], list[str]]]:
    """(partition, changed ids, deleted ids) per shard the run touches; a full run: every one."""
    if len(shards) == 1:
        return [(shards[0], run.changed_doc_ids, run.deleted_doc_ids)]
    if run.full:
        return [(partition, [], []) for partition in shards]
    out = []
    for number, partition in enumerate(shards):
        changed = [d for d in run.changed_doc_ids if shard_of(d, len(shards)) == number]
        deleted = [d for d in run.deleted_doc_ids if shard_of(d, len(shards)) == number]
        if changed or deleted:
            out.append((partition, changed, deleted))
    return out


def publish_sensor_name(collection: str) -> str:
    return f"{collection}_publish_sensor"


def build_publish_sensor(collection: str, config: PipelineConfig, job) -> dg.SensorDefinition:
    settings = config.sensor
    shards = config.collection(collection).partition_keys()

    @dg.sensor(
        name=publish_sensor_name(collection),
        job=job,
        minimum_interval_seconds=settings.interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING
        if settings.enabled
        else dg.DefaultSensorStatus.STOPPED,
        description=(
            f"Watches collection {collection!r} for added, changed and deleted documents and "
            f"launches a run that embeds only those, batching changes within "
            f"{settings.window_seconds}s (at most {settings.max_docs_per_run} documents a run)."
        ),
    )
    def publish_sensor(
        context: dg.SensorEvaluationContext, pipeline: PipelineResource, s3: S3Resource
    ) -> dg.SensorResult:
        engine = pipeline.collection(collection, s3)
        decision = evaluate_publish(
            collection,
            engine.collection_source,
            context.cursor,
            now=time.time(),
            window_seconds=settings.window_seconds,
            max_docs=settings.max_docs_per_run,
            snapshots=StateSnapshots(engine.staging.root / "sensor-state" / collection),
        )
        if decision.cursor_reset:
            context.log.warning("unreadable cursor: starting over with a full reconciliation")
        engine.tracking.record_pending(engine.index, decision.pending_changes)
        run_requests = [
            dg.RunRequest(
                run_key=run.run_key if len(shards) == 1 else f"{run.run_key}:{partition}",
                partition_key=partition,
                run_config={
                    "ops": {
                        "source_documents": {
                            "config": {
                                "changed_doc_ids": changed,
                                "deleted_doc_ids": deleted,
                            }
                        }
                    }
                },
                tags={TRIGGER_TAG: "publish_sensor_full" if run.full else "publish_sensor"},
            )
            for run in decision.runs
            for partition, changed, deleted in split_by_shard(run, shards)
        ]
        if run_requests:
            return dg.SensorResult(run_requests=run_requests, cursor=decision.cursor)
        return dg.SensorResult(
            skip_reason=dg.SkipReason(decision.skip_reason), cursor=decision.cursor
        )

    return publish_sensor
