"""The vector index's stage assets, declared: the collection's collect (`source_documents`)
-> prepare (`document_chunks`) -> plan (`batch_plan`) -> execute (`chunk_embeddings`) -> land
(`vector_index`, with per-row lineage and per-partition freshness) -> the generation's review
(`index_generation`). The builder (`assets.product_stages`) writes the assets; this module says
what the index's land checks and reports."""

from datetime import timedelta

import dagster as dg

from assets.index_generation import build_index_generation
from assets.namespace import SAMPLE, Namespace, pipeline_of
from assets.partitions import GROUP_NAME
from assets.product_stages import (
    Context,
    LandCheck,
    Landed,
    LandReport,
    ProductAssets,
    build_product_assets,
    embedding_engine,
    embedding_options,
)
from assets.source_documents import build_source_documents
from assets.stage_io import RUN_CHARTS, as_metadata, column_schema
from batch_pipeline.health.freshness import partition_freshness, worst_lag
from batch_pipeline.index.kind import index_partition
from batch_pipeline.index.land import table_metadata
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import IndexProduct, configured_generations
from batch_pipeline.stages import EXECUTE, LAND, PLAN, PREPARE, STAGES, Stage
from batch_pipeline.stages.columns import COLUMN_DESCRIPTIONS
from batch_pipeline.state.vector_store import chunk_schema
from batch_pipeline.triggers.tags import is_reconcile

INDEX_MATCHES_TRACKING = "index_matches_tracking"
FRESHNESS_WITHIN_BUDGET = "freshness_lag_within_budget"
COMPLETENESS = "completeness"
RUN_WITHIN_WINDOW = "run_within_window"
UNREAD = "unread_within_limit"
INDEXES_CURRENT = "indexes_current"

# What the Plots view draws for a partition: the run's measures, completeness and freshness,
# how much the run did, and whether a full re-embedding would fit the nightly window.
# (the inputs embedded are charted on chunk_embeddings, where they are computed)
CHARTS = RUN_CHARTS | {
    "completeness",
    "lag_seconds",
    "documents_landed",
    "backfill_estimate_seconds",
}


def _stage_report(context: Context, stage: Stage, partition, output) -> dict:  # noqa: ANN001
    """What the index's prepare says beyond its summary: the chunking it used."""
    values = output.summary.metadata()
    if stage.name == PREPARE.name:
        settings = partition.chunk_settings()
        values |= {
            "max_tokens": settings.max_tokens,
            "overlap_tokens": settings.overlap_tokens,
            "model_fingerprint": partition.fingerprint,
        }
    return values


def _land_report(landed: Landed) -> LandReport:
    """The table's lineage, freshness and completeness, the nightly upkeep, and the index's
    checks."""
    context, engine, summary = landed.context, landed.partition, landed.summary
    product: IndexProduct = landed.product
    config = pipeline_of(context).config
    run_id = context.run.run_id
    measures, report = landed.measures, summary.reconciled
    maintenance = {}
    if is_reconcile(context.run.tags):
        maintenance = product.nightly_maintenance(
            timedelta(hours=config.maintenance.version_retention_hours), owner=run_id
        )
    table = table_metadata(engine.store, engine.index)
    worst = worst_lag(engine.tracking, configured_generations(config))
    budget = config.freshness.lag_budget_seconds
    limits = config.limits
    completeness = summary.completeness  # of the table as land left it
    backfill = engine.backfill_estimate(measures.partition_inputs)
    unread = engine.unread_excess(run_id, measures.attempted)
    indexes = summary.index_health or product.index_health(summary.indexes, (engine.index,))
    for problem in indexes.problems:
        context.log.warning(f"index not current: {problem}")
    for name, reason in (summary.indexes.built if summary.indexes else {}).items():
        context.log.info(f"built index {name}: {reason}")
    dimension = engine.model.embedding_dimension
    metadata = {
        "dagster/uri": dg.MetadataValue.path(engine.store.table_uri(engine.index)),
        "dagster/row_count": table["rows"],
        "dagster/column_schema": column_schema(
            chunk_schema(dimension, engine.collection.metadata.fields)
        ),
        **summary.metadata(),
        **{k: v for k, v in table.items() if k != "rows"},
        **partition_freshness(engine.tracking, engine.index),
        **completeness,
        **(backfill.metadata() if backfill else {}),
        **{f"maintenance_{k}": v for k, v in maintenance.items()},
        "documents_failing": engine.tracking.failure_count(engine.index),
        "run_id": run_id,
        "model": engine.model.name,
        "model_fingerprint": engine.fingerprint,
        "generation_state": product.record().state,
    }
    checks = [
        dg.AssetCheckResult(
            check_name=COMPLETENESS,
            passed=completeness["completeness"] >= limits.completeness_threshold,
            metadata=as_metadata(
                {**completeness, "threshold": limits.completeness_threshold}, {"completeness"}
            ),
        ),
        dg.AssetCheckResult(
            check_name=INDEX_MATCHES_TRACKING, passed=report.ok, metadata=report.metadata()
        ),
        dg.AssetCheckResult(
            check_name=FRESHNESS_WITHIN_BUDGET,
            passed=worst[0] <= budget,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "worst_collection": worst[1] or engine.name,
                "worst_lag_seconds": worst[0],
                "lag_budget_seconds": budget,
            },
        ),
        dg.AssetCheckResult(
            check_name=INDEXES_CURRENT,
            passed=indexes.ok,
            metadata=as_metadata(indexes.metadata(), {"unindexed_rows"}),
        ),
        dg.AssetCheckResult(
            check_name=UNREAD,
            passed=unread is None,
            metadata=as_metadata(
                {
                    "reason": unread,
                    "documents_attempted": measures.attempted,
                    "max_unread_fraction": limits.max_unread_fraction,
                }
            ),
        ),
        dg.AssetCheckResult(
            check_name=RUN_WITHIN_WINDOW,
            passed=not measures.overran,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "trigger": measures.trigger,
                "run_wall_seconds": round(measures.wall_seconds, 3),
                "window_seconds": measures.window_seconds,
                "window_used_fraction": round(measures.window_used_fraction or 0, 4),
            },
        ),
    ]
    return LandReport(metadata, checks)


def _opened(context: Context) -> tuple[IndexProduct, IndexPartition]:
    """The partition's collection's index, and the partition (its review is
    index_generation's)."""
    execution = context.resources.inference.execution()
    env = pipeline_of(context).product_env(execution=execution)
    partition = index_partition(env, context.partition_key)
    return partition.product, partition


INDEX_ASSETS = ProductAssets(
    stages=STAGES,
    open=_opened,
    group_name=GROUP_NAME,
    engine=embedding_engine,
    plan_options=embedding_options,
    columns=COLUMN_DESCRIPTIONS,
    descriptions={
        PREPARE.name: "Chunks of new and changed documents, cut with the model's tokenizer "
        "along headings and paragraphs, each with its stable id, exact model input and "
        "staleness flag.",
        PLAN.name: "Every stale model input exactly once (duplicates folded), sorted by token "
        "length and packed into batches sized against the device's token/memory budget.",
        EXECUTE.name: "One vector per planned input, computed batch by batch on the best device "
        "present (CUDA, then MPS, then CPU), in the plan's order; on CPU by torch or OpenVINO, "
        "in fp32 or bf16, whichever measured fastest within the fidelity bar (see the "
        "metadata).",
        LAND.name: "The collection's chunks and vectors in LanceDB, one row per chunk, each "
        "carrying its doc id, chunk id, input hash, model and fingerprint, run id, embedding "
        "time and source version. A changed document's stale chunks go in the same commit as "
        "its new ones; deleted documents' chunks are removed too. The nightly reconciliation "
        "also compacts the table and cleans up old versions.",
    },
    stage_report=_stage_report,
    land_checks=(
        LandCheck(
            INDEX_MATCHES_TRACKING,
            "The table holds exactly the chunks the tracking store records for each document "
            "(same ids, input hashes and fingerprint); a full run repairs drift. Blocking: "
            "index_generation does not run on a table that fails it.",
            blocking=True,
        ),
        LandCheck(
            FRESHNESS_WITHIN_BUDGET,
            "No collection's oldest unlanded source change is older than "
            "freshness.lag_budget_seconds.",
        ),
        LandCheck(
            COMPLETENESS,
            "Landed documents / (known documents - quarantined) is at least "
            "limits.completeness_threshold; a document counts as landed only if the table "
            "holds exactly its chunks.",
        ),
        LandCheck(
            RUN_WITHIN_WINDOW,
            "The run's wall-clock fits its window: schedule.window_minutes for scheduled, "
            "manual and backfill runs; sensor.window_seconds plus freshness.lag_budget_seconds "
            "for sensor runs. Warns on an overrun.",
        ),
        LandCheck(
            UNREAD,
            "The documents the run could not read (no answer, or refused: not their content's "
            "fault) are at most limits.max_unread_fraction of those it attempted: a run whose "
            "source mostly failed to read is no success, even though what did read landed.",
        ),
        LandCheck(
            INDEXES_CURRENT,
            "The generation's table carries every index the collection's "
            "index: settings ask for (the ANN index from vector.min_rows rows on, a full-text "
            "index per full_text column), each readable and lacking at most max_unindexed_rows "
            "rows (LanceDB's index_stats); fails naming the index that is missing, damaged or "
            "behind, or whose build failed in this land. Blocking: index_generation does not "
            "review a generation whose indexes are not current.",
            blocking=True,
        ),
    ),
    land_report=_land_report,
    land_charts=CHARTS,
    freshness=dg.FreshnessPolicy.time_window(
        fail_window=timedelta(hours=26), warn_window=timedelta(hours=24)
    ),
    reviews=False,  # index_generation reviews it, with the drift check
)


def build_index_assets(
    partitions: dg.PartitionsDefinition, namespace: Namespace = SAMPLE
) -> list[dg.AssetsDefinition]:
    """The vector index's assets: the collection's collect, the four stages from the
    builder, and the generation's review, their keys in `namespace`."""
    return [
        build_source_documents(partitions, namespace),
        *build_product_assets(INDEX_ASSETS, partitions, namespace),
        build_index_generation(partitions, namespace),
    ]
