"""Stage 5: the collection's LanceDB table, with per-row lineage and per-partition freshness."""

from datetime import timedelta

import dagster as dg

from assets.partitions import GROUP_NAME, OWNERS, TRANSIENT_RETRY
from assets.stage_io import column_schema, upstream_path
from batch_pipeline.completeness import partition_completeness
from batch_pipeline.freshness import partition_freshness
from batch_pipeline.landing import table_metadata
from batch_pipeline.reconcile import reconcile_index
from batch_pipeline.run_history import drop_expired_generations
from batch_pipeline.vector_store import chunk_schema
from resources.pipeline import PipelineResource

INDEX_MATCHES_TRACKING = "index_matches_tracking"
FRESHNESS_WITHIN_BUDGET = "freshness_lag_within_budget"
COMPLETENESS = "completeness"
MODE_TAG = "batch_pipeline/mode"
RECONCILE = "reconcile"


def build_vector_index(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name="vector_index",
        deps=["chunk_embeddings", "document_chunks", "source_documents"],
        partitions_def=partitions,
        group_name=GROUP_NAME,
        owners=OWNERS,
        retry_policy=TRANSIENT_RETRY,
        kinds={"lancedb"},
        freshness_policy=dg.FreshnessPolicy.time_window(
            fail_window=timedelta(hours=26), warn_window=timedelta(hours=24)
        ),
        check_specs=[
            dg.AssetCheckSpec(INDEX_MATCHES_TRACKING, asset="vector_index"),
            dg.AssetCheckSpec(FRESHNESS_WITHIN_BUDGET, asset="vector_index"),
            dg.AssetCheckSpec(COMPLETENESS, asset="vector_index"),
        ],
    )
    def vector_index(
        context: dg.AssetExecutionContext, pipeline: PipelineResource
    ) -> dg.MaterializeResult:
        """The collection's chunks and vectors in LanceDB, one row per chunk, each carrying
        its doc id, chunk id, input hash, model and fingerprint, run id, embedding time and
        source version. A changed document's stale chunks go in the same commit as its new
        ones; deleted documents' chunks are removed too. The nightly reconciliation also
        compacts the table and cleans up old versions."""
        engine = pipeline.collection(context.partition_key)
        run_id = context.run.run_id
        paths = {
            stage: upstream_path(context, dg.AssetKey(stage), engine.staging)
            for stage in ("source_documents", "document_chunks", "chunk_embeddings")
        }
        dimension = engine.model.embedding_dimension
        summary = engine.land(
            run_id,
            paths["source_documents"],
            paths["document_chunks"],
            paths["chunk_embeddings"],
            dimension,
            partition=context.partition_key,
        )
        maintenance = {}
        if context.run.tags.get(MODE_TAG) == RECONCILE:
            retention = timedelta(hours=pipeline.config.maintenance.version_retention_hours)
            maintenance = engine.maintain(retention, owner=run_id)
            dropped = drop_expired_generations(
                engine.store,
                engine.generations,
                engine.name,
                timedelta(days=pipeline.config.generations.retention_days),
            )
            maintenance["generations_dropped"] = len(dropped)
        table = table_metadata(engine.store, engine.index)
        freshness = partition_freshness(engine.tracking, engine.index)
        report = reconcile_index(engine.store, engine.tracking, engine.index)
        worst = max(
            (
                (
                    partition_freshness(engine.tracking, pipeline.collection(key).index)[
                        "lag_seconds"
                    ],
                    key,
                )
                for key in (c.name for c in pipeline.config.collections)
            ),
            default=(0.0, context.partition_key),
        )
        budget = pipeline.config.freshness.lag_budget_seconds
        limits = pipeline.config.limits
        completeness = partition_completeness(
            engine.tracking, engine.index, limits.quarantine_after_failures
        )
        return dg.MaterializeResult(
            metadata={
                "dagster/uri": dg.MetadataValue.path(engine.store.table_uri(engine.index)),
                "dagster/row_count": table["rows"],
                "dagster/column_schema": column_schema(chunk_schema(dimension)),
                **summary.metadata(),
                **{k: v for k, v in table.items() if k != "rows"},
                **freshness,
                **completeness,
                **{f"maintenance_{k}": v for k, v in maintenance.items()},
                "documents_failing": len(engine.tracking.list_failures(engine.index)),
                "run_id": run_id,
                "model": engine.model.name,
                "model_fingerprint": engine.fingerprint,
                "generation": engine.index,
                "generation_state": engine.generation()["state"],
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name=COMPLETENESS,
                    passed=completeness["completeness"] >= limits.completeness_threshold,
                    metadata={**completeness, "threshold": limits.completeness_threshold},
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
                        "worst_partition": worst[1],
                        "worst_lag_seconds": worst[0],
                        "lag_budget_seconds": budget,
                    },
                ),
            ],
        )

    return vector_index
