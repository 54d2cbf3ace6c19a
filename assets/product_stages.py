"""Every product's stage assets, built by one builder from its `ProductAssets`: each asset
opens the partition, calls one method of the run frame (`runs.partition.StagedPartition`) with the
stage file upstream of it, and returns the stage file's metadata. Land then reviews the
generation (`nightly_review`: the nightly forced review and retention) and reports the frame's
mass-deletion check, for every product alike. A product over a collection's documents shares
the collection's own collect (`source_documents`), which is not built again.

What a product adds is declared, never written as an asset: its checks and what its land
reports (`land_report`), what its stage files say beyond their summaries (`stage_report`), how
its partition and its engine are opened. A product declared outside the engine (`products:`
in the configuration) names `build_product_assets` in its definitions function too.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import dagster as dg

from assets.namespace import SAMPLE, Namespace, pipeline_of
from assets.partitions import (
    GPU_POOL,
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
from assets.stage_io import RUN_CHARTS, STAGE_CHARTS, as_metadata, parquet_metadata, upstream_path
from batch_pipeline.declaration import Product, ProductKind
from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
from batch_pipeline.generations.review import GenerationReview
from batch_pipeline.measures.run import RunMeasures
from batch_pipeline.products import product_for_partition
from batch_pipeline.runs.landing import Landing
from batch_pipeline.runs.partition import StagedPartition
from batch_pipeline.runs.request import Engine, RunRequest, StageOutput
from batch_pipeline.stages import COLLECT, Stage
from resources import FAMILY_RESOURCES

Context = dg.AssetExecutionContext
# the partition's product and the partition itself; None where the partition has none of
# this product (a collection without briefs): its prepare then materialises nothing
Opener = Callable[[Context], tuple[Product, StagedPartition] | None]
EngineFor = Callable[[Context, StagedPartition], Callable[[], Engine]]


@dataclass(frozen=True)
class LandCheck:
    """A check the product's land reports (beyond the frame's `no_mass_deletion_held`)."""

    name: str
    description: str
    blocking: bool = False  # downstream waits for it


@dataclass(frozen=True)
class Landed:
    """What the land reported on: the run, the product and partition, the landing (the
    product's summary and the frame's record of the run), and the generation's review (None
    for a product reviewed by an asset of its own)."""

    context: Context
    product: Product
    partition: StagedPartition
    landing: Landing
    review: GenerationReview | None

    @property
    def summary(self):  # noqa: ANN201 - the product's land summary
        return self.landing.summary

    @property
    def measures(self) -> RunMeasures:
        return self.landing.measures


@dataclass(frozen=True)
class LandReport:
    """The product's own part of its land's materialisation."""

    metadata: dict[str, object]
    checks: list[dg.AssetCheckResult] = field(default_factory=list)


def family_resources(kind: ProductKind) -> frozenset[str]:
    """What a declared kind's assets ask for: the pipeline, the inference resource (every
    land's review embeds), and the resource that chooses its model family's executor."""
    family = FAMILY_RESOURCES.get(kind.family)  # none for a kind that runs no model
    return frozenset({"pipeline", "inference", *([family] if family else [])})


def family_execution(context: Context, kind: ProductKind) -> ExecutorChoice | None:
    """The executor the resource of `kind`'s model family chooses (`FAMILY_RESOURCES`:
    inference for embed, generation for generate, scoring for score), as `--executor`
    chooses it for `run --kind`; None for a kind that runs no model, or a step that did not
    ask for that resource."""
    key = FAMILY_RESOURCES.get(kind.family)
    if key is None or key not in context.resources._asdict():
        return None
    return context.resources.original_resource_dict[key].execution()


def open_declared(kind: ProductKind) -> Opener:
    """The partition's product of `kind`, as `products.product_for_partition` opens it, on
    the executor its model family's resource chooses."""

    def opened(context: Context) -> tuple[Product, StagedPartition]:
        env = pipeline_of(context).product_env(execution=family_execution(context, kind))
        product = product_for_partition(kind, env, context.partition_key)
        return product, product.partition(context.partition_key)

    return opened


def _no_engine(context: Context, partition: StagedPartition) -> Callable[[], Engine]:
    def load() -> Engine:
        raise RuntimeError(f"{type(partition).__name__} declares no engine to load")

    return load


def _default_options(context: Context, partition: StagedPartition) -> ExecuteOptions:
    return ExecuteOptions()


def embedding_engine(context: Context, partition: StagedPartition) -> Callable[[], Engine]:
    """What a product that embeds loads: the inference resource's runner for its model."""
    return lambda: context.resources.inference.runner(partition.model)


def embedding_options(context: Context, partition: StagedPartition) -> ExecuteOptions:
    """A product that embeds plans its batches against the inference resource's budget."""
    return context.resources.inference.execute_options(partition.model)


def _summary_metadata(context: Context, stage: Stage, partition, output) -> dict:  # noqa: ANN001
    return output.summary.metadata()


def _land_metadata(landed: Landed) -> LandReport:
    return LandReport(landed.landing.metadata())


@dataclass(frozen=True)
class ProductAssets:
    """A product's Dagster face: its five stages and what its assets add to the frame's."""

    stages: tuple[Stage, ...]
    open: Opener
    group_name: str
    resources: frozenset[str] = frozenset({"pipeline", "inference"})
    engine: EngineFor = _no_engine  # what execute (and a land that scores) loads
    plan_options: Callable[[Context, StagedPartition], ExecuteOptions] = _default_options
    columns: dict[str, str] = field(default_factory=dict)  # the stage files' columns, described
    descriptions: dict[str, str] = field(default_factory=dict)  # by stage name; else its summary
    charts: dict[str, frozenset[str]] = field(default_factory=dict)  # by stage name
    # a stage's summary as metadata, with anything the product adds (`_summary_metadata`)
    stage_report: Callable[[Context, Stage, StagedPartition, StageOutput], dict] = _summary_metadata
    land_checks: tuple[LandCheck, ...] = ()
    land_report: Callable[[Landed], LandReport] = _land_metadata
    land_charts: frozenset[str] = RUN_CHARTS
    land_deps: tuple[str, ...] = ()  # assets land waits for beyond execute
    prepare_deps: tuple[str, ...] = ()  # assets prepare reads beyond collect (another's land)
    freshness: dg.FreshnessPolicy | None = None
    reviews: bool = True  # land reviews the generation (else an asset of the product's does)
    optional: bool = False  # a partition may have none of the product (see `Opener`)
    fatal: tuple[type[Exception], ...] = ()  # land errors a retry cannot fix
    execute_pool: str | None = GPU_POOL


def build_product_assets(
    spec: ProductAssets, partitions: dg.PartitionsDefinition, namespace: Namespace = SAMPLE
) -> list[dg.AssetsDefinition]:
    """The assets of the product's five stages on `partitions` (collect only where the
    product has its own), their keys in `namespace`."""
    collect, prepare, plan, execute, land = spec.stages
    common = {
        "partitions_def": partitions,
        "group_name": spec.group_name,
        "key_prefix": list(namespace.prefix),
        "required_resource_keys": namespace.resource_keys(spec.resources),
    }
    key = namespace.key

    def described(stage: Stage) -> str:
        return spec.descriptions.get(stage.name, stage.summary)

    def opened(context: Context) -> tuple[Product, StagedPartition]:
        found = spec.open(context)
        if found is None:  # only an optional product's prepare materialises nothing instead
            raise dg.Failure(f"{context.partition_key} has no {spec.group_name}")
        return found

    def request(
        context: Context, partition: StagedPartition, allow_mass_delete: bool = False
    ) -> RunRequest:
        return RunRequest(
            context.run.run_id,
            spec.engine(context, partition),
            trigger=run_trigger(context),
            progress=progress_log(context),
            progress_interval=PROGRESS_INTERVAL_SECONDS,
            allow_mass_delete=allow_mass_delete,
            started_at=run_started_at(context),
            retries=step_retries(context),
        )

    def upstream(context: Context, partition: StagedPartition, stage: Stage):  # noqa: ANN202
        return upstream_path(context, stage, partition.staging)

    def result(
        context: Context, stage: Stage, partition: StagedPartition, output: StageOutput
    ) -> dg.MaterializeResult:
        for failure in getattr(output.summary, "failures", ()):  # what prepare could not read
            context.log.warning(f"{failure.doc_id}: {failure.reason}: {failure.message}")
        for input_hash, reason in getattr(output.summary, "failed_inputs", {}).items():
            context.log.warning(f"input {input_hash[:12]} failed: {reason}")
        values = {
            **parquet_metadata(output.path, spec.columns),
            **spec.stage_report(context, stage, partition, output),
            **({"model": partition.model.name} if stage is execute else {}),
        }
        charts = spec.charts.get(stage.name, STAGE_CHARTS.get(stage.name, frozenset()))
        return dg.MaterializeResult(metadata=as_metadata(values, charts))

    built: list[dg.AssetsDefinition] = []
    if collect.asset != COLLECT.asset:

        @dg.asset(
            name=collect.asset,
            retry_policy=TRANSIENT_RETRY,
            kinds=set(collect.kinds),
            description=described(collect),
            **common,
        )
        @retried_if_transient
        def collect_asset(context: Context) -> dg.MaterializeResult:
            _, partition = opened(context)
            output = partition.collect_stage(request(context, partition))
            return result(context, collect, partition, output)

        built.append(collect_asset)

    @dg.asset(
        name=prepare.asset,
        deps=namespace.keys([collect.asset, *spec.prepare_deps]),
        kinds=set(prepare.kinds),
        description=described(prepare),
        output_required=not spec.optional,
        **common,
    )
    def prepare_asset(context: Context) -> Iterator[dg.MaterializeResult]:
        found = spec.open(context)
        if found is None:
            context.log.info(f"{context.partition_key} has no {spec.group_name}: nothing to do")
            return
        _, partition = found
        collected = upstream(context, partition, collect)
        output = partition.prepare_stage(request(context, partition), collected)
        yield result(context, prepare, partition, output)

    @dg.asset(
        name=plan.asset,
        deps=[key(prepare.asset)],
        kinds=set(plan.kinds),
        description=described(plan),
        **common,
    )
    def plan_asset(context: Context) -> dg.MaterializeResult:
        _, partition = opened(context)
        prepared = upstream(context, partition, prepare)
        options = spec.plan_options(context, partition)
        output = partition.plan(context.run.run_id, prepared, options)
        return result(context, plan, partition, output)

    @dg.asset(
        name=execute.asset,
        deps=[key(plan.asset)],
        retry_policy=TRANSIENT_RETRY,
        pool=spec.execute_pool,
        kinds=set(execute.kinds),
        description=described(execute),
        **common,
    )
    @retried_if_transient
    def execute_asset(context: Context) -> dg.MaterializeResult:
        _, partition = opened(context)
        output = partition.execute(
            context.run.run_id,
            upstream(context, partition, plan),
            spec.engine(context, partition),
            options=spec.plan_options(context, partition),
            progress=progress_log(context),
            progress_interval=PROGRESS_INTERVAL_SECONDS,
        )
        return result(context, execute, partition, output)

    held = partition_check(
        NO_MASS_DELETION_HELD,
        key(land.asset),
        partitions,
        "The run deleted what its source no longer lists, or held back nothing: fails when "
        "deletions beyond limits.max_delete_fraction or limits.max_delete_documents were held "
        "back (an empty listing looks like that). Confirm real deletions by materialising "
        "with allow_mass_delete: true.",
    )

    @dg.asset(
        name=land.asset,
        # land reads collect's and prepare's files of the same partition too (located by
        # `upstream_path`, from their latest materialisation): only execute is drawn as an
        # edge, since they are upstream of it already and more edges would misread as data
        # skipping the plan
        deps=namespace.keys([execute.asset, *spec.land_deps]),
        retry_policy=TRANSIENT_RETRY,
        kinds=set(land.kinds),
        description=described(land),
        freshness_policy=spec.freshness,
        check_specs=[
            *(
                partition_check(c.name, key(land.asset), partitions, c.description, c.blocking)
                for c in spec.land_checks
            ),
            held,
        ],
        **common,
    )
    @retried_if_transient
    def land_asset(context: Context, config: LandConfig) -> dg.MaterializeResult:
        product, partition = opened(context)
        collected, prepared, executed = (
            upstream(context, partition, stage) for stage in (collect, prepare, execute)
        )
        try:
            landing = partition.land_stage(
                request(context, partition, config.allow_mass_delete),
                collected,
                prepared,
                executed,
            )
            review, dropped = (
                nightly_review(context, product, context.resources.inference.runner)
                if spec.reviews
                else (None, [])
            )
        except spec.fatal as error:  # retrying cannot fix it
            raise dg.Failure(description=str(error), allow_retries=False) from None
        report = spec.land_report(Landed(context, product, partition, landing, review))
        reviewed = review.metadata().items() if review is not None else ()
        values = {
            **report.metadata,
            "deletions_held": landing.deletions_held,
            "deletions_held_reason": landing.deletions_held_reason,
            **landing.measures.metadata(),
            **partition.rolling_measures(),
            "generation": partition.index,
            **({"generations_dropped": len(dropped)} if spec.reviews else {}),
            **{f"review_{k}": v for k, v in reviewed if k not in ("generation", "fingerprint")},
        }
        held_check = held_deletions_check(
            context, landing.deletions_held, landing.deletions_held_reason
        )
        return dg.MaterializeResult(
            metadata=as_metadata(values, spec.land_charts),
            check_results=[*report.checks, held_check],
        )

    return [*built, prepare_asset, plan_asset, execute_asset, land_asset]


def declared_assets(
    kind: ProductKind, partitions: dg.PartitionsDefinition, namespace: Namespace = SAMPLE
) -> list[dg.AssetsDefinition]:
    """The assets of a kind that declares no Dagster definitions of its own: its five
    `stages` (collect the collection's own where its first stage is), opened through the
    declared road (`open_declared`), in the group its land asset names, in `namespace`."""
    spec = ProductAssets(
        stages=kind.stages,
        open=open_declared(kind),
        group_name=kind.stages[-1].asset,
        resources=family_resources(kind),
    )
    return build_product_assets(spec, partitions, namespace)
