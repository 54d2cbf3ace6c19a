"""The ticket intent product's five stages, declared, one daily partition per day of tickets.

collect (`ticket_exports`) -> prepare (`ticket_inputs`) -> plan (`ticket_batch_plan`) ->
execute (`ticket_embeddings`) -> land (`ticket_intents`). The builder
(`assets.product_stages`) writes the assets, each calling `batch_pipeline.tickets`; this
module says what the day's land checks and reports.
"""

from datetime import timedelta

import dagster as dg

from assets.namespace import SAMPLE, Namespace, pipeline_of
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
from assets.stage_io import RUN_CHARTS, as_metadata, column_schema
from batch_pipeline.config import PipelineConfig
from batch_pipeline.products import product_for_partition
from batch_pipeline.runs.partition import StagedPartition
from batch_pipeline.tickets import (
    TICKET_COLLECT,
    TICKET_EXECUTE,
    TICKET_LAND,
    TICKET_PLAN,
    TICKET_PREPARE,
    TICKET_STAGES,
)
from batch_pipeline.tickets.classifier.training import LabelsRefusedError
from batch_pipeline.tickets.columns import TICKET_COLUMN_DESCRIPTIONS as DESCRIBED
from batch_pipeline.tickets.intent_store import intent_schema
from batch_pipeline.tickets.kind import TICKETS
from batch_pipeline.tickets.product import TicketProduct
from batch_pipeline.tickets.report import classifier_line

TICKETS_GROUP = "ticket_intents"
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


def ticket_partitions(config: PipelineConfig) -> dg.DailyPartitionsDefinition:
    """One partition per day from `tickets.start_date`, counted in `tickets.timezone`; the
    newest is yesterday (a day is classified once it is over)."""
    settings = config.tickets
    return dg.DailyPartitionsDefinition(start_date=settings.start_date, timezone=settings.timezone)


def fine_tune_metadata(trained: dict | None, config: PipelineConfig) -> dict[str, object]:
    """A fine-tuned encoder's training minutes beside the nightly window (none when the
    encoder is frozen)."""
    tuned = (trained or {}).get("fine_tune")
    if not tuned:
        return {}
    return {
        "encoder_fine_tune_minutes": dg.MetadataValue.float(round(tuned["seconds"] / 60, 3)),
        "window_minutes": dg.MetadataValue.float(float(config.schedule.window_minutes)),
    }


def _land_report(landed: Landed) -> LandReport:
    """The day's mix, the classifier that scored it, and the day's checks."""
    context, product, summary = landed.context, landed.product, landed.summary
    trained = product.trained()
    for failure in summary.failures[:20]:
        context.log.warning(f"ticket {failure.doc_id}: {failure.reason}: {failure.message}")
    shift = summary.mix.shift
    limit = pipeline_of(context).config.tickets.max_mix_shift
    completeness = landed.measures.completeness
    metadata = {
        "dagster/uri": dg.MetadataValue.path(product.store.table_uri(product.index)),
        "dagster/row_count": summary.mix.total,
        "dagster/column_schema": column_schema(
            intent_schema(product.classifier.base_model.embedding_dimension, summary.cascade),
            DESCRIBED,
        ),
        **intent_mix_table(summary.metadata()),
        "taxonomy_version": product.taxonomy.version,
        "model_fingerprint": product.classifier.model_fingerprint,
        "fingerprints": FINGERPRINTS,
        "classifier": classifier_line(trained),
        **(
            {"classifier_candidates": dg.MetadataValue.json(trained["candidates"])}
            if trained
            else {}
        ),
        **fine_tune_metadata(trained, pipeline_of(landed.context).config),
    }
    checks = [
        dg.AssetCheckResult(
            check_name=INTENT_MIX_SHIFT,
            passed=shift is None or shift <= limit,
            severity=dg.AssetCheckSeverity.WARN,
            metadata=as_metadata({"shift": shift, "max_mix_shift": limit}, {"shift"}),
        ),
        dg.AssetCheckResult(
            check_name=DAY_COMPLETE,
            passed=completeness is None or completeness >= 1.0,
            metadata=as_metadata(
                {"completeness": completeness, "tickets_failed": len(summary.failures)},
                {"completeness", "tickets_failed"},
            ),
        ),
    ]
    return LandReport(metadata, checks)


def _opened(context: Context) -> tuple[TicketProduct, StagedPartition]:
    env = pipeline_of(context).product_env(execution=context.resources.inference.execution())
    product = product_for_partition(TICKETS, env, context.partition_key).product
    return product, product.day(context.partition_key)


TICKET_ASSETS = ProductAssets(
    stages=TICKET_STAGES,
    open=_opened,
    group_name=TICKETS_GROUP,
    engine=embedding_engine,
    plan_options=embedding_options,
    columns=DESCRIBED,
    descriptions={
        TICKET_COLLECT.name: "The day's ticket export, every row checked: a row with no id, "
        "no body, a created_at that is not a date, or an id seen before that day is kept as "
        "failed with its reason, and the rest of the day goes on.",
        TICKET_PREPARE.name: "Each ticket's model input (subject and body, normalised, cut to "
        "max_tokens), its hash, and whether it needs a vector: not if this model already "
        "computed one for the same input, so a taxonomy change re-scores without a forward "
        "pass.",
        TICKET_PLAN.name: "Every input that needs a vector, once, packed into batches under the "
        "device's token budget: the vector index's own plan stage.",
        TICKET_EXECUTE.name: "One vector per planned input, from the inference resource: the "
        "vector index's own execute stage (checkpoints, OOM splitting, progress).",
        TICKET_LAND.name: "The day's tickets classified against the intent taxonomy: one row "
        "per ticket with its intent (or unknown), confidence and top three, input hash, model "
        "fingerprint, taxonomy version, run id and time. The day is replaced in one commit; a "
        "ticket with an unchanged input keeps its row. Then the generation is reviewed: a new "
        "taxonomy is promoted once it holds every day the live one does and passes the "
        "evaluation gate.",
    },
    land_checks=(
        LandCheck(
            INTENT_MIX_SHIFT,
            "The day's intent mix is within tickets.max_mix_shift (total variation distance) "
            "of the trailing 7 days' pooled mix. Warns on a larger shift: a new kind of ticket, "
            "an outage, or a broken export.",
        ),
        LandCheck(
            DAY_COMPLETE,
            "Every valid ticket of the day is classified under the generation (bad rows are "
            "recorded as failures with their reason and do not count).",
        ),
    ),
    land_report=_land_report,
    land_charts=CHARTS,
    freshness=dg.FreshnessPolicy.time_window(
        fail_window=timedelta(hours=50), warn_window=timedelta(hours=26)
    ),
    fatal=(LabelsRefusedError,),  # retrying cannot fix the labels
)


def build_ticket_assets(
    partitions: dg.PartitionsDefinition, namespace: Namespace = SAMPLE
) -> list[dg.AssetsDefinition]:
    """The ticket product's five stage assets, from the builder, their keys in `namespace`."""
    return build_product_assets(TICKET_ASSETS, partitions, namespace)
