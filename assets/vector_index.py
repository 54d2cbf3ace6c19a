"""Stage 5: the collection's LanceDB table, with per-row lineage and per-partition freshness."""

from datetime import timedelta

import dagster as dg

from assets.partitions import (
    GROUP_NAME,
    OWNERS,
    TRANSIENT_RETRY,
    partition_check,
    retried_if_transient,
)
from assets.run_info import (
    NO_MASS_DELETION_HELD,
    LandConfig,
    held_deletions_check,
    run_started_at,
    run_trigger,
    step_retries,
)
from assets.stage_io import RUN_CHARTS, as_metadata, column_schema, upstream_path
from batch_pipeline.health.freshness import partition_freshness, worst_lag
from batch_pipeline.index.land import table_metadata
from batch_pipeline.index.partition import configured_generations
from batch_pipeline.stages import COLLECT, EXECUTE, LAND, PREPARE
from batch_pipeline.state.vector_store import chunk_schema
from batch_pipeline.triggers.tags import is_reconcile
from resources.pipeline import PipelineResource

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


def build_vector_index(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name=LAND.asset,
        # Land also reads collect's and prepare's files of the same partition (located by
        # `upstream_path`, from their latest materialisation): only execute is drawn as an
        # edge, since they are upstream of it already and more edges would misread as data
        # skipping the plan.
        deps=[EXECUTE.asset],
        partitions_def=partitions,
        group_name=GROUP_NAME,
        owners=OWNERS,
        retry_policy=TRANSIENT_RETRY,
        kinds=set(LAND.kinds),
        freshness_policy=dg.FreshnessPolicy.time_window(
            fail_window=timedelta(hours=26), warn_window=timedelta(hours=24)
        ),
        check_specs=[
            partition_check(
                INDEX_MATCHES_TRACKING,
                LAND.asset,
                partitions,
                "The table holds exactly the chunks the tracking store records for each "
                "document (same ids, input hashes and fingerprint); a full run repairs drift. "
                "Blocking: index_generation does not run on a table that fails it.",
                blocking=True,
            ),
            partition_check(
                FRESHNESS_WITHIN_BUDGET,
                LAND.asset,
                partitions,
                "No collection's oldest unlanded source change is older than "
                "freshness.lag_budget_seconds.",
            ),
            partition_check(
                COMPLETENESS,
                LAND.asset,
                partitions,
                "Landed documents / (known documents - quarantined) is at least "
                "limits.completeness_threshold; a document counts as landed only if the table "
                "holds exactly its chunks.",
            ),
            partition_check(
                RUN_WITHIN_WINDOW,
                LAND.asset,
                partitions,
                "The run's wall-clock fits its window: schedule.window_minutes for scheduled, "
                "manual and backfill runs; sensor.window_seconds plus "
                "freshness.lag_budget_seconds for sensor runs. Warns on an overrun.",
            ),
            partition_check(
                UNREAD,
                LAND.asset,
                partitions,
                "The documents the run could not read (no answer, or refused: not their "
                "content's fault) are at most limits.max_unread_fraction of those it "
                "attempted: a run whose source mostly failed to read is no success, even "
                "though what did read landed.",
            ),
            partition_check(
                INDEXES_CURRENT,
                LAND.asset,
                partitions,
                "The generation's table and its question rows carry every index the "
                "collection's index: settings ask for (the ANN index from vector.min_rows rows "
                "on, a full-text index per full_text column), each readable and lacking at most "
                "max_unindexed_rows rows (LanceDB's index_stats); fails naming the index that is "
                "missing, damaged or behind, or whose build failed in this land. Blocking: "
                "index_generation does not review a generation whose indexes are not current.",
                blocking=True,
            ),
            partition_check(
                NO_MASS_DELETION_HELD,
                LAND.asset,
                partitions,
                "The run deleted everything its source no longer lists, or held back nothing: "
                "fails when deletions beyond limits.max_delete_fraction or "
                "limits.max_delete_documents were held back (an empty listing looks like that). "
                "Confirm real deletions by materialising with allow_mass_delete: true.",
            ),
        ],
    )
    @retried_if_transient
    def vector_index(
        context: dg.AssetExecutionContext, config: LandConfig, pipeline: PipelineResource
    ) -> dg.MaterializeResult:
        """The collection's chunks and vectors in LanceDB, one row per chunk, each carrying
        its doc id, chunk id, input hash, model and fingerprint, run id, embedding time and
        source version. A changed document's stale chunks go in the same commit as its new
        ones; deleted documents' chunks are removed too. The nightly reconciliation also
        compacts the table and cleans up old versions."""
        engine = pipeline.partition(context.partition_key)
        run_id = context.run.run_id
        collected, chunks, embeddings = (
            upstream_path(context, stage, engine.staging) for stage in (COLLECT, PREPARE, EXECUTE)
        )
        dimension = engine.model.embedding_dimension
        summary = engine.land(
            run_id,
            collected,
            chunks,
            embeddings,
            dimension,
            trigger=run_trigger(context),
            retries=step_retries(context),
            started_at=run_started_at(context),
            allow_mass_delete=config.allow_mass_delete,
        )
        measures, report = summary.measures, summary.reconciled
        maintenance = {}
        if is_reconcile(context.run.tags):
            settings = pipeline.config
            maintenance = engine.nightly_maintenance(
                timedelta(hours=settings.maintenance.version_retention_hours), owner=run_id
            )
        table = table_metadata(engine.store, engine.index)
        freshness = partition_freshness(engine.tracking, engine.index)
        worst = worst_lag(engine.tracking, configured_generations(pipeline.config))
        budget = pipeline.config.freshness.lag_budget_seconds
        limits = pipeline.config.limits
        completeness = summary.completeness  # of the table as land left it
        backfill = engine.backfill_estimate(measures.partition_inputs)
        unread = engine.unread_excess(run_id, measures.attempted)
        indexes = engine.index_health(summary.indexes)
        for problem in indexes.problems:
            context.log.warning(f"index not current: {problem}")
        for name, reason in (summary.indexes.built if summary.indexes else {}).items():
            context.log.info(f"built index {name}: {reason}")
        return dg.MaterializeResult(
            metadata=as_metadata(
                {
                    "dagster/uri": dg.MetadataValue.path(engine.store.table_uri(engine.index)),
                    "dagster/row_count": table["rows"],
                    "dagster/column_schema": column_schema(
                        chunk_schema(dimension, engine.collection.metadata.fields)
                    ),
                    **summary.metadata(),
                    **{k: v for k, v in table.items() if k != "rows"},
                    **freshness,
                    **completeness,
                    **measures.metadata(),
                    **engine.rolling_measures(),
                    **(backfill.metadata() if backfill else {}),
                    **{f"maintenance_{k}": v for k, v in maintenance.items()},
                    "documents_failing": engine.tracking.failure_count(engine.index),
                    "run_id": run_id,
                    "model": engine.model.name,
                    "model_fingerprint": engine.fingerprint,
                    "generation": engine.index,
                    "generation_state": engine.record().state,
                },
                CHARTS,
            ),
            check_results=[
                dg.AssetCheckResult(
                    check_name=COMPLETENESS,
                    passed=completeness["completeness"] >= limits.completeness_threshold,
                    metadata=as_metadata(
                        {**completeness, "threshold": limits.completeness_threshold},
                        {"completeness"},
                    ),
                ),
                dg.AssetCheckResult(
                    check_name=INDEX_MATCHES_TRACKING,
                    passed=report.ok,
                    metadata=report.metadata(),
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
                held_deletions_check(
                    context, summary.deletions_held, summary.deletions_held_reason
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
            ],
        )

    return vector_index
