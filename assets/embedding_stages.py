"""The plan and execute assets of a product that embeds (the vector index, the ticket
intents), built once: each calls its partition's frame-owned `plan` or `execute` and returns
the stage file's metadata, so every embedding product plans, embeds, logs its failed inputs
and charts the same way."""

from collections.abc import Callable

import dagster as dg

from assets.partitions import (
    GPU_POOL,
    PROGRESS_INTERVAL_SECONDS,
    TRANSIENT_RETRY,
    progress_log,
    retried_if_transient,
)
from assets.stage_io import STAGE_CHARTS, as_metadata, parquet_metadata, upstream_path
from batch_pipeline.runs import StagedPartition
from batch_pipeline.stages import Stage
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource

PartitionFor = Callable[[PipelineResource, str], StagedPartition]  # (resource, partition key)


def _stage_metadata(output, stage: Stage, descriptions: dict[str, str]) -> dict:  # noqa: ANN001
    """A stage file's location, rows and described columns, and what the stage counted."""
    return as_metadata(
        {**parquet_metadata(output.path, descriptions), **output.summary.metadata()},
        STAGE_CHARTS[stage.name],
    )


def build_embedding_stages(
    stages: tuple[Stage, ...],
    partitions: dg.PartitionsDefinition,
    partition_for: PartitionFor,
    descriptions: dict[str, str],
    plan_description: str,
    execute_description: str,
    **common: object,
) -> list[dg.AssetsDefinition]:
    """The plan and execute assets of a product's five `stages`, on `partitions`;
    `partition_for` opens a partition of the product, `descriptions` describes its stage
    files' columns, `common` (group, owners) goes to both assets."""
    _, prepare, plan, execute, _ = stages

    @dg.asset(
        name=plan.asset,
        deps=[prepare.asset],
        partitions_def=partitions,
        kinds=set(plan.kinds),
        description=plan_description,
        **common,
    )
    def plan_asset(
        context: dg.AssetExecutionContext,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ) -> dg.MaterializeResult:
        partition = partition_for(pipeline, context.partition_key)
        prepared = upstream_path(context, prepare, partition.staging)
        options = inference.execute_options(partition.model)
        output = partition.plan(context.run.run_id, prepared, options)
        return dg.MaterializeResult(metadata=_stage_metadata(output, plan, descriptions))

    @dg.asset(
        name=execute.asset,
        deps=[plan.asset],
        partitions_def=partitions,
        retry_policy=TRANSIENT_RETRY,
        pool=GPU_POOL,
        kinds=set(execute.kinds),
        description=execute_description,
        **common,
    )
    @retried_if_transient
    def execute_asset(
        context: dg.AssetExecutionContext,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ) -> dg.MaterializeResult:
        partition = partition_for(pipeline, context.partition_key)
        planned = upstream_path(context, plan, partition.staging)
        output = partition.execute(
            context.run.run_id,
            planned,
            lambda: inference.runner(partition.model),
            progress=progress_log(context),
            progress_interval=PROGRESS_INTERVAL_SECONDS,
        )
        for input_hash, reason in output.summary.failed_inputs.items():
            context.log.warning(f"input {input_hash[:12]} failed: {reason}")
        metadata = {
            **_stage_metadata(output, execute, descriptions),
            "model": partition.model.name,
        }
        return dg.MaterializeResult(metadata=metadata)

    return [plan_asset, execute_asset]
