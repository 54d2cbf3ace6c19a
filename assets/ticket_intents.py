"""The ticket intent product's five stages, one daily partition per day of tickets.

collect (`ticket_exports`) -> prepare (`ticket_inputs`) -> plan (`ticket_batch_plan`) ->
execute (`ticket_embeddings`) -> land (`ticket_intents`). Plan and execute run the vector
index's own engine stages; each asset is an adapter over `batch_pipeline.tickets`.
"""

from datetime import timedelta

import dagster as dg

from assets.embedding_stages import build_embedding_stages
from assets.partitions import (
    TRANSIENT_RETRY,
    partition_check,
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
from assets.stage_io import (
    RUN_CHARTS,
    STAGE_CHARTS,
    as_metadata,
    column_schema,
    parquet_metadata,
    upstream_path,
)
from batch_pipeline.config import PipelineConfig
from batch_pipeline.stages import Stage
from batch_pipeline.tickets import (
    TICKET_COLLECT,
    TICKET_EXECUTE,
    TICKET_LAND,
    TICKET_PREPARE,
    TICKET_STAGES,
)
from batch_pipeline.tickets.columns import TICKET_COLUMN_DESCRIPTIONS as DESCRIBED
from batch_pipeline.tickets.intent_store import intent_schema
from batch_pipeline.tickets.report import classifier_line
from batch_pipeline.tickets.training import LabelsRefusedError
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource

TICKETS_GROUP = "ticket_intents"
TICKETS_OWNERS = ["team:support-analytics"]
INTENT_MIX_SHIFT = "intent_mix_shift"
DAY_COMPLETE = "day_complete"

# What the two fingerprints on a ticket materialisation mean, said once, in the metadata.
FINGERPRINTS = (
    "generation: <tickets name>__<fingerprint of the model, the input cut, the taxonomy and "
    "the thresholds>, one table per taxonomy version; model_fingerprint: the model and the "
    "input cut alone, what a ticket's vector depends on (shared by every taxonomy's table)"
)


def intent_mix_table(values: dict[str, object]) -> dict[str, object]:
    """The day's mix as one table in the UI (intent, tickets, share), not a chart per intent."""
    mix = values.get("intent_mix") or {}
    total = sum(mix.values()) or 1
    table = dg.MetadataValue.table(
        records=[
            dg.TableRecord({"intent": name, "tickets": count, "share": round(count / total, 4)})
            for name, count in mix.items()
        ],
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn("intent", "string"),
                dg.TableColumn("tickets", "int"),
                dg.TableColumn("share", "float"),
            ]
        ),
    )
    return {**values, "intent_mix": table}


# What the Plots view draws for a day: the run's measures, the mix's summaries, the review.
CHARTS = RUN_CHARTS | {
    "tickets_classified",
    "tickets_newly_classified",
    "unknown_rate",
    "intent_mix_shift",
    "mean_confidence",
    "review_candidate_accuracy",
}


def stage_metadata(output, stage: Stage) -> dict[str, object]:  # noqa: ANN001 - a StageOutput
    """A ticket stage file's metadata: its location, rows and described columns, and what the
    stage counted."""
    return as_metadata(
        {**parquet_metadata(output.path, DESCRIBED), **output.summary.metadata()},
        STAGE_CHARTS[stage.name],
    )


def ticket_partitions(config: PipelineConfig) -> dg.DailyPartitionsDefinition:
    """One partition per day from `tickets.start_date`, counted in `tickets.timezone`; the
    newest is yesterday (a day is classified once it is over)."""
    settings = config.tickets
    return dg.DailyPartitionsDefinition(start_date=settings.start_date, timezone=settings.timezone)


def _common(partitions: dg.PartitionsDefinition) -> dict:
    return {"partitions_def": partitions, "group_name": TICKETS_GROUP, "owners": TICKETS_OWNERS}


def build_ticket_assets(partitions: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    @dg.asset(
        name=TICKET_COLLECT.asset,
        retry_policy=TRANSIENT_RETRY,
        kinds=set(TICKET_COLLECT.kinds),
        **_common(partitions),
    )
    @retried_if_transient
    def ticket_exports(
        context: dg.AssetExecutionContext, pipeline: PipelineResource
    ) -> dg.MaterializeResult:
        """The day's ticket export, every row checked: a row with no id, no body, a
        created_at that is not a date, or an id seen before that day is kept as failed with
        its reason, and the rest of the day goes on."""
        day = pipeline.tickets().day(context.partition_key)
        output = day.collect(context.run.run_id)
        return dg.MaterializeResult(metadata=stage_metadata(output, TICKET_COLLECT))

    @dg.asset(
        name=TICKET_PREPARE.asset,
        deps=[TICKET_COLLECT.asset],
        kinds=set(TICKET_PREPARE.kinds),
        **_common(partitions),
    )
    def ticket_inputs(
        context: dg.AssetExecutionContext, pipeline: PipelineResource
    ) -> dg.MaterializeResult:
        """Each ticket's model input (subject and body, normalised, cut to max_tokens), its
        hash, and whether it needs a vector: not if this model already computed one for the
        same input, so a taxonomy change re-scores without a forward pass."""
        day = pipeline.tickets().day(context.partition_key)
        collected = upstream_path(context, TICKET_COLLECT, day.product.staging)
        output = day.prepare(context.run.run_id, collected)
        return dg.MaterializeResult(metadata=stage_metadata(output, TICKET_PREPARE))

    @dg.asset(
        name=TICKET_LAND.asset,
        deps=[TICKET_EXECUTE.asset],  # reads prepare's and collect's files too: see vector_index
        retry_policy=TRANSIENT_RETRY,
        kinds=set(TICKET_LAND.kinds),
        freshness_policy=dg.FreshnessPolicy.time_window(
            fail_window=timedelta(hours=50), warn_window=timedelta(hours=26)
        ),
        check_specs=[
            partition_check(
                INTENT_MIX_SHIFT,
                TICKET_LAND.asset,
                partitions,
                "The day's intent mix is within tickets.max_mix_shift (total variation "
                "distance) of the trailing 7 days' pooled mix. Warns on a larger shift: a "
                "new kind of ticket, an outage, or a broken export.",
            ),
            partition_check(
                DAY_COMPLETE,
                TICKET_LAND.asset,
                partitions,
                "Every valid ticket of the day is classified under the generation (bad rows "
                "are recorded as failures with their reason and do not count).",
            ),
            partition_check(
                NO_MASS_DELETION_HELD,
                TICKET_LAND.asset,
                partitions,
                "The day's export lost no more tickets than the mass-deletion limits allow "
                "(limits.max_delete_fraction, limits.max_delete_documents): past them the "
                "day keeps its rows and this check fails. Confirm a real shrink by "
                "materialising with allow_mass_delete: true.",
            ),
        ],
        **_common(partitions),
    )
    @retried_if_transient
    def ticket_intents(
        context: dg.AssetExecutionContext,
        config: LandConfig,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ) -> dg.MaterializeResult:
        """The day's tickets classified against the intent taxonomy: one row per ticket with
        its intent (or unknown), confidence and top three, input hash, model fingerprint,
        taxonomy version, run id and time. The day is replaced in one commit; a ticket with
        an unchanged input keeps its row. Then the generation is reviewed: a new taxonomy is
        promoted once it holds every day the live one does and passes the evaluation gate."""
        product = pipeline.tickets()
        day = product.day(context.partition_key)
        collected, inputs, embeddings = (
            upstream_path(context, stage, product.staging)
            for stage in (TICKET_COLLECT, TICKET_PREPARE, TICKET_EXECUTE)
        )
        try:
            summary = day.land(
                context.run.run_id,
                collected,
                inputs,
                embeddings,
                lambda: inference.runner(product.model),
                trigger=run_trigger(context),
                retries=step_retries(context),
                started_at=run_started_at(context),
                allow_mass_delete=config.allow_mass_delete,
            )
            review, dropped = nightly_review(context, product, inference.runner)
        except LabelsRefusedError as error:  # retrying cannot fix the labels
            raise dg.Failure(description=str(error), allow_retries=False) from None
        trained = product.trained()
        for failure in summary.failures[:20]:
            context.log.warning(f"ticket {failure.doc_id}: {failure.reason}: {failure.message}")
        shift = summary.mix.shift
        limit = pipeline.config.tickets.max_mix_shift
        measures = summary.measures
        return dg.MaterializeResult(
            metadata=as_metadata(
                {
                    "dagster/uri": dg.MetadataValue.path(product.store.table_uri(product.index)),
                    "dagster/row_count": summary.mix.total,
                    "dagster/column_schema": column_schema(
                        intent_schema(product.model.embedding_dimension), DESCRIBED
                    ),
                    **intent_mix_table(summary.metadata(product.taxonomy.names)),
                    **measures.metadata(),
                    **day.rolling_measures(),
                    "generation": product.index,
                    "taxonomy_version": product.taxonomy.version,
                    "model_fingerprint": product.model_fingerprint,
                    "fingerprints": FINGERPRINTS,
                    "generations_dropped": len(dropped),
                    "classifier": classifier_line(trained),
                    **(
                        {"classifier_candidates": dg.MetadataValue.json(trained["candidates"])}
                        if trained
                        else {}
                    ),
                    **{
                        f"review_{k}": v
                        for k, v in review.metadata().items()
                        if k not in ("generation", "fingerprint")  # said above, once
                    },
                },
                CHARTS,
            ),
            check_results=[
                dg.AssetCheckResult(
                    check_name=INTENT_MIX_SHIFT,
                    passed=shift is None or shift <= limit,
                    severity=dg.AssetCheckSeverity.WARN,
                    metadata=as_metadata({"shift": shift, "max_mix_shift": limit}, {"shift"}),
                ),
                held_deletions_check(
                    context, summary.deletions_held, summary.deletions_held_reason
                ),
                dg.AssetCheckResult(
                    check_name=DAY_COMPLETE,
                    passed=measures.completeness is None or measures.completeness >= 1.0,
                    metadata=as_metadata(
                        {
                            "completeness": measures.completeness,
                            "tickets_failed": len(summary.failures),
                        },
                        {"completeness", "tickets_failed"},
                    ),
                ),
            ],
        )

    plan_and_execute = build_embedding_stages(
        TICKET_STAGES,
        partitions,
        lambda pipeline, key: pipeline.tickets().day(key),
        DESCRIBED,
        "Every input that needs a vector, once, packed into batches under the device's token "
        "budget: the vector index's own plan stage.",
        "One vector per planned input, from the inference resource: the vector index's own "
        "execute stage (checkpoints, OOM splitting, progress).",
        group_name=TICKETS_GROUP,
        owners=TICKETS_OWNERS,
    )
    return [ticket_exports, ticket_inputs, *plan_and_execute, ticket_intents]
