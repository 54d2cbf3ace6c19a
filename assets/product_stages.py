"""A product's five stage assets, built from its declaration and its stage table: each calls
one method of the product's partition (`runs.StagedPartition`) and returns the stage's
metadata; land then reviews the generation (`nightly_review`: the nightly forced review and
retention) and reports the frame's mass-deletion check. A product over a collection's
documents shares the collection's own collect (`source_documents`), which is not built again.

A product declared outside the engine (`products:` in the configuration) gets its assets from
here by naming `build_product_assets` in its definitions function; nothing else is written for
it in `assets/`.
"""

from collections.abc import Callable

import dagster as dg

from assets.partitions import (
    PROGRESS_INTERVAL_SECONDS,
    TRANSIENT_RETRY,
    partition_check,
    progress_log,
    retried_if_transient,
)
from assets.run_info import (
    NO_MASS_DELETION_HELD,
    LandConfig,
    held_deletions_check,
    nightly_review,
    run_started_at,
    run_trigger,
    step_retries,
)
from assets.stage_io import RUN_CHARTS, as_metadata, parquet_metadata, upstream_path
from batch_pipeline.declaration import Product, ProductKind
from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.products import product_for_partition
from batch_pipeline.runs import RunRequest, StagedPartition
from batch_pipeline.stages import COLLECT, Stage
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource

# what execute loads, for a product whose executor runs a model (an embedder, a generator)
EngineFor = Callable[[InferenceResource, StagedPartition], object]


def _no_engine(inference: InferenceResource, partition: StagedPartition) -> object:
    raise RuntimeError(f"{type(partition).__name__} declares no engine to load")


def build_product_assets(
    kind: ProductKind,
    stages: tuple[Stage, ...],
    partitions: dg.PartitionsDefinition,
    engine_for: EngineFor = _no_engine,
    descriptions: dict[str, str] | None = None,
    **common: object,
) -> list[dg.AssetsDefinition]:
    """The assets of `kind`'s five `stages` on `partitions` (collect only when the product
    has its own); `engine_for` gives execute's engine, `descriptions` describe its stage
    files' columns, `common` (group_name, owners) goes to every asset."""
    described = descriptions or {}

    def opened(context: dg.AssetExecutionContext, pipeline: PipelineResource):  # noqa: ANN202
        product: Product = product_for_partition(
            kind, pipeline.product_env(), context.partition_key
        )
        return product, product.partition(context.partition_key)

    def request(context: dg.AssetExecutionContext, allow_mass_delete: bool = False) -> RunRequest:
        return RunRequest(
            context.run.run_id,
            lambda: None,
            trigger=run_trigger(context),
            progress=progress_log(context),
            progress_interval=PROGRESS_INTERVAL_SECONDS,
            allow_mass_delete=allow_mass_delete,
            started_at=run_started_at(context),
            retries=step_retries(context),
        )

    def result(output) -> dg.MaterializeResult:  # noqa: ANN001 - a StageOutput
        values = {**parquet_metadata(output.path, described), **output.summary.metadata()}
        return dg.MaterializeResult(metadata=as_metadata(values))

    def upstream(context, partition: StagedPartition, position: int):  # noqa: ANN001, ANN202
        return upstream_path(context, stages[position], partition.staging)

    collect, prepare, plan, execute, land = stages
    built: list[dg.AssetsDefinition] = []
    if collect.asset != COLLECT.asset:

        @dg.asset(name=collect.asset, partitions_def=partitions, kinds=set(collect.kinds),
                  description=collect.summary, **common)  # fmt: skip
        def collect_asset(context: dg.AssetExecutionContext, pipeline: PipelineResource):
            _, partition = opened(context, pipeline)
            return result(partition.collect_stage(request(context)))

        built.append(collect_asset)

    @dg.asset(name=prepare.asset, deps=[collect.asset], partitions_def=partitions,
              kinds=set(prepare.kinds), description=prepare.summary, **common)  # fmt: skip
    def prepare_asset(context: dg.AssetExecutionContext, pipeline: PipelineResource):
        _, partition = opened(context, pipeline)
        return result(partition.prepare_stage(request(context), upstream(context, partition, 0)))

    @dg.asset(name=plan.asset, deps=[prepare.asset], partitions_def=partitions,
              kinds=set(plan.kinds), description=plan.summary, **common)  # fmt: skip
    def plan_asset(context: dg.AssetExecutionContext, pipeline: PipelineResource):
        _, partition = opened(context, pipeline)
        prepared = upstream(context, partition, 1)
        return result(partition.plan(context.run.run_id, prepared, ExecuteOptions()))

    @dg.asset(name=execute.asset, deps=[plan.asset], partitions_def=partitions,
              retry_policy=TRANSIENT_RETRY, kinds=set(execute.kinds),
              description=execute.summary, **common)  # fmt: skip
    @retried_if_transient
    def execute_asset(
        context: dg.AssetExecutionContext,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ):
        _, partition = opened(context, pipeline)
        output = partition.execute(
            context.run.run_id,
            upstream(context, partition, 2),
            lambda: engine_for(inference, partition),
            progress=progress_log(context),
            progress_interval=PROGRESS_INTERVAL_SECONDS,
        )
        return result(output)

    @dg.asset(
        name=land.asset,
        deps=[execute.asset],
        partitions_def=partitions,
        retry_policy=TRANSIENT_RETRY,
        kinds=set(land.kinds),
        description=f"{land.summary}; then the generation's review",
        check_specs=[
            partition_check(
                NO_MASS_DELETION_HELD,
                land.asset,
                partitions,
                "Fails when the run held back deletions beyond limits.max_delete_fraction or "
                "limits.max_delete_documents (an empty listing looks like that); confirm real "
                "ones by materialising with allow_mass_delete: true.",
            )
        ],
        **common,
    )
    @retried_if_transient
    def land_asset(
        context: dg.AssetExecutionContext,
        config: LandConfig,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ):
        product, partition = opened(context, pipeline)
        collected, prepared, executed = (upstream(context, partition, i) for i in (0, 1, 3))
        landed = partition.land_stage(
            request(context, config.allow_mass_delete), collected, prepared, executed
        )
        review, dropped = nightly_review(context, product, inference.runner)
        values = {
            **landed.metadata(),
            **landed.measures.metadata(),
            "generation": product.index,
            "generations_dropped": len(dropped),
            **{f"review_{k}": v for k, v in review.metadata().items()},
        }
        return dg.MaterializeResult(
            metadata=as_metadata(values, RUN_CHARTS),
            check_results=[
                held_deletions_check(context, landed.deletions_held, landed.deletions_held_reason)
            ],
        )

    return [*built, prepare_asset, plan_asset, execute_asset, land_asset]
