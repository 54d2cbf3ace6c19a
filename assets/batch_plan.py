"""Stage 3: the stale chunks packed into batches under a padded-token budget."""

import dagster as dg

from assets.partitions import GROUP_NAME, OWNERS
from assets.stage_io import parquet_metadata, upstream_path
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource


def build_batch_plan(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name="batch_plan",
        deps=["document_chunks"],
        partitions_def=partitions,
        group_name=GROUP_NAME,
        owners=OWNERS,
        kinds={"python", "parquet"},
    )
    def batch_plan(
        context: dg.AssetExecutionContext,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ) -> dg.MaterializeResult:
        """Every stale model input exactly once (duplicates folded), sorted by token length
        and packed into batches sized against the device's token/memory budget."""
        engine = pipeline.collection(context.partition_key)
        chunks = upstream_path(context, dg.AssetKey("document_chunks"), engine.staging)
        settings, width = inference.plan_settings(engine.model)
        output = engine.plan(context.run.run_id, chunks, settings, width)
        return dg.MaterializeResult(
            metadata={**parquet_metadata(output.path), **output.summary.metadata()}
        )

    return batch_plan
