"""After landing: the generation's evaluation, its promotion decision, and the drift check."""

import dagster as dg

from assets.namespace import SAMPLE, Namespace, pipeline_of
from assets.partitions import partition_check
from assets.stage_io import as_metadata
from batch_pipeline.declaration import review_after_run
from batch_pipeline.generations.drift import drift_report
from batch_pipeline.index.kind import VectorIndex, index_partition
from batch_pipeline.stages import LAND
from batch_pipeline.triggers.tags import is_nightly

GENERATIONS_GROUP = "index_generations"
INDEX_GENERATION = "index_generation"
DRIFT = "embedding_drift"
# What the Plots view draws: the review's scores (named by their cut-off) and what it saw.
CHARTS = frozenset(
    {"candidate_recall_at_*", "candidate_mrr_at_*", "candidate_queries", "documents", "rows"}
)


def build_index_generation(
    partitions: dg.PartitionsDefinition, namespace: Namespace = SAMPLE
) -> dg.AssetsDefinition:
    @dg.asset(
        name=INDEX_GENERATION,
        key_prefix=list(namespace.prefix),
        deps=[namespace.key(LAND.asset)],
        partitions_def=partitions,
        group_name=GENERATIONS_GROUP,
        kinds={"python", "lancedb"},
        required_resource_keys=namespace.resource_keys(["pipeline", "inference"]),
        check_specs=[
            partition_check(
                DRIFT,
                namespace.key(INDEX_GENERATION),
                partitions,
                "A random sample of landed chunks, re-embedded by the current inference path, "
                "matches the stored vectors (cosine >= generations.drift_min_cosine). Run when "
                "the table changed since the last check and nightly (generations.review).",
            )
        ],
    )
    def index_generation(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """The collection's model generation built by this configuration: its completeness,
        its recall@k and MRR@k on the collection's evaluation set against the live generation,
        and the promotion decision with its reason. Promotion is one atomic switch of the live
        pointer; readers keep using the old generation until then. A nightly run forces the
        review and drops the retired generations past retention, as every product's does."""
        pipeline, inference = pipeline_of(context), context.resources.inference
        engine = index_partition(pipeline.product_env(), context.partition_key).product
        nightly = is_nightly(context.run.tags)
        review, dropped = review_after_run(VectorIndex(engine), inference.runner, nightly)
        for warning in review.warnings:
            context.log.warning(warning)
        settings = pipeline.config.generations
        if review.evaluated:
            drift = drift_report(
                engine.store,
                engine.index,
                inference.runner(engine.model),
                settings.drift_sample,
                settings.drift_min_cosine,
            )
            drift_check = dg.AssetCheckResult(
                check_name=DRIFT, passed=drift.passed, metadata=drift.metadata()
            )
        else:  # the table is what the last check saw: its result stands, no model loads
            drift_check = dg.AssetCheckResult(
                check_name=DRIFT,
                passed=True,
                metadata={"checked": False, "why": "the table is unchanged since the last check"},
            )
        metadata = {**review.metadata(), "generations_dropped": len(dropped)}
        return dg.MaterializeResult(
            metadata=as_metadata(metadata, CHARTS), check_results=[drift_check]
        )

    return index_generation
