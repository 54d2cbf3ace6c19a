"""Stage 3: the stale chunks packed into batches under a padded-token budget."""

import dagster as dg

from assets.partitions import GROUP_NAME, OWNERS
from assets.stage_io import STAGE_CHARTS, as_metadata, parquet_metadata, upstream_path
from batch_pipeline.stages import PLAN, PREPARE
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource


def build_batch_plan(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name=PLAN.asset,
        deps=[PREPARE.asset],
        partitions_def=partitions,
        group_name=GROUP_NAME,
        owners=OWNERS,
        kinds=set(PLAN.kinds),
    )
    def batch_plan(
        context: dg.AssetExecutionContext,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ) -> dg.MaterializeResult:
        """Every stale model input exactly once (duplicates folded), sorted by token length
        and packed into batches sized against the device's token/memory budget."""
        engine = pipeline.partition(context.partition_key)
        chunks = upstream_path(context, PREPARE, engine.staging)
        output = engine.plan(context.run.run_id, chunks, inference.execute_options(engine.model))
        return dg.MaterializeResult(
            metadata=as_metadata(
                {**parquet_metadata(output.path), **output.summary.metadata()},
                STAGE_CHARTS[PLAN.name],
            )
        )

    return batch_plan
