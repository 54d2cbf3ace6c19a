"""Stage 4: the planned inputs embedded by the inference resource."""

import dagster as dg

from assets.partitions import (
    GPU_POOL,
    GROUP_NAME,
    OWNERS,
    PROGRESS_INTERVAL_SECONDS,
    TRANSIENT_RETRY,
    progress_log,
    retried_if_transient,
)
from assets.stage_io import STAGE_CHARTS, as_metadata, parquet_metadata, upstream_path
from batch_pipeline.stages import EXECUTE, PLAN
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource


def build_chunk_embeddings(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name=EXECUTE.asset,
        deps=[PLAN.asset],
        partitions_def=partitions,
        group_name=GROUP_NAME,
        owners=OWNERS,
        retry_policy=TRANSIENT_RETRY,
        pool=GPU_POOL,
        kinds=set(EXECUTE.kinds),
    )
    @retried_if_transient
    def chunk_embeddings(
        context: dg.AssetExecutionContext,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ) -> dg.MaterializeResult:
        """One vector per planned input, computed batch by batch on the best device present
        (CUDA, then MPS, then CPU), in the plan's order; on CPU by torch or OpenVINO, in fp32
        or bf16, whichever measured fastest within the fidelity bar (see the metadata)."""
        engine = pipeline.partition(context.partition_key)
        plan = upstream_path(context, PLAN, engine.staging)
        output = engine.execute(
            context.run.run_id,
            plan,
            lambda: inference.runner(engine.model),
            progress=progress_log(context),
            progress_interval=PROGRESS_INTERVAL_SECONDS,
        )
        for input_hash, reason in output.summary.failed_inputs.items():
            context.log.warning(f"input {input_hash[:12]} failed: {reason}")
        return dg.MaterializeResult(
            metadata=as_metadata(
                {
                    **parquet_metadata(output.path),
                    **output.summary.metadata(),
                    "model": engine.model.name,
                },
                STAGE_CHARTS[EXECUTE.name],
            )
        )

    return chunk_embeddings
