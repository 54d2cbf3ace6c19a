"""The document briefs: a chat model over every document of a collection, on the collection's
partitions.

collect is the collection's own `source_documents` (the source is listed once for both
products) -> prepare (`brief_prompts`) -> plan (`brief_plan`) -> execute
(`brief_generations`, in the `gpu` pool) -> land (`document_briefs`, which reviews the
generation). For a collection without `briefs:`, `brief_prompts` materialises nothing and the
rest are skipped. The builder (`assets.product_stages`) writes the four stage assets, each
calling `batch_pipeline.briefs`; this module says what the briefs' land checks and reports,
and adds the question rows.
"""

from datetime import timedelta

import dagster as dg

from assets.index_generation import INDEX_GENERATION
from assets.namespace import SAMPLE, Namespace, pipeline_of
from assets.partitions import partition_check
from assets.product_stages import (
    Context,
    LandCheck,
    Landed,
    LandReport,
    ProductAssets,
    build_product_assets,
)
from assets.stage_io import RUN_CHARTS, as_metadata, column_schema
from assets.vector_index import INDEXES_CURRENT
from batch_pipeline.briefs import BRIEF_EXECUTE, BRIEF_LAND, BRIEF_PLAN, BRIEF_PREPARE, BRIEF_STAGES
from batch_pipeline.briefs.kind import brief_product
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.briefs.store import brief_schema
from batch_pipeline.names import briefs_product_name
from batch_pipeline.runs.partition import StagedPartition
from batch_pipeline.stages import COLLECT, Stage
from batch_pipeline.state.table_indexes import IndexHealth

BRIEFS_GROUP = "document_briefs"
VALID_OUTPUTS = "valid_output_rate"

BRIEF_COLUMN_DESCRIPTIONS = {
    "doc_id": "The document's id in its source.",
    "collection": "The collection the document belongs to.",
    "partition": "The Dagster partition the brief was generated in.",
    "title": "The document's title.",
    "content_hash": "Hash of the document's content the brief was generated from.",
    "input_hash": "The staleness key: the content hash and the generation's fingerprint.",
    "raw_output": "The model's output as it came, before it was parsed.",
    "finish_reason": "Why generation stopped (stop: finished).",
    "prompt_tokens": "Tokens of the rendered prompt.",
    "output_tokens": "Tokens generated.",
    "truncated": "Whether the document was cut to briefs.document_tokens to fit the prompt.",
    "control_tokens": "The chat model's control tokens (<|im_start|>, ...) found in the "
    "document and broken before it went into the prompt.",
    "prompt_version": "Hash of the prompt file the brief was generated with.",
    "schema_version": "Hash of the output schema.",
    "model_name": "The chat model.",
    "model_fingerprint": "Hash of the chat model's files.",
    "run_id": "The Dagster run that generated the brief.",
    "generated_at": "When the brief was generated.",
}

STAGE_CHARTS = {
    "prepare": frozenset(
        {"dagster/row_count", "briefs_stale", "briefs_fresh", "documents_truncated"}
    ),
    "plan": frozenset(
        {
            "dagster/row_count",
            "prompts_planned",
            "prompts_refused",
            "prompt_tokens",
            "estimated_peak_kv_share",
        }
    ),
    "execute": frozenset(
        {
            "dagster/row_count",
            "requests_generated",
            "output_tokens",
            "output_tokens_per_second",
            "requests_per_second",
            "valid_share",
            "prefix_cache_hit_rate",
            "engine_load_seconds",
        }
    ),
}
CHARTS = RUN_CHARTS | {"briefs_landed", "briefs_failed", "review_candidate_*"}
QUESTION_ROWS = "question_rows"
QUESTION_ROWS_DESCRIPTION = (
    "With briefs.index_questions, each live brief's questions as retrieval rows beside the "
    "collection's vector index (`<collection>_questions__<fingerprint>`, one per index "
    "generation), embedded with that generation's model and tied to their document: replaced "
    "when its live brief changes, deleted with it. Search reads them with the chunks. Reports "
    "the live index's recall@k and MRR@k on the evaluation set with and without them, "
    "measured in the same run. Materialises nothing while the setting is off."
)
QUESTION_CHARTS = frozenset({"questions_embedded", "question_rows", "recall_at_*", "mrr_at_*"})


BRIEF_JOB = "brief_job"


def build_brief_job(  # noqa: ANN201 - an asset job
    assets: list[dg.AssetsDefinition], namespace: Namespace = SAMPLE
):
    """The briefs with their collection's collect: what the provider-batch sensor runs to
    collect finished batches. It lists the source itself, so it never lands against an older
    listing than its own run's (the last collect could be days old: the briefs would brief
    documents as they were then, and miss those changed or deleted since)."""
    return dg.define_asset_job(
        namespace.name(BRIEF_JOB),
        selection=dg.AssetSelection.assets(namespace.key(COLLECT.asset), *assets),
        description="The document briefs of one partition, after a fresh collect of its "
        "collection's source.",
    )


def _opened(context: Context) -> tuple[BriefProduct, StagedPartition] | None:
    """The partition's collection's briefs, or None when it has none. Opened once per run
    (`PipelineResource.opened`), so every step lands the prompt, schema and model the run's
    first step read, in the generation they were rendered for."""
    pipeline, generation = pipeline_of(context), context.resources.generation
    collection, _shard = pipeline.config.locate(context.partition_key)
    if collection.briefs is None:
        return None

    def open_briefs() -> BriefProduct:
        env = pipeline.product_env()
        product = brief_product(
            env.config,
            env.storage,
            collection.name,
            env.tracking,
            env.store,
            env.documents_for,
            generation.generator(),
            generation.plan_settings(),
            execution=generation.execution(),
        )
        product.fingerprint  # noqa: B018 - read now: the prompt, schema and model, pinned
        return product

    product = pipeline.opened(briefs_product_name(collection.name), open_briefs)
    return product, product.partition(context.partition_key)


def _stage_report(context: Context, stage: Stage, partition, output) -> dict:  # noqa: ANN001
    """Execute's summary with its cost at the device's price."""
    if stage is not BRIEF_EXECUTE:
        return output.summary.metadata()
    price = pipeline_of(context).config.cost.device_price(partition.product.generator.device)
    return output.summary.metadata(price)


def _land_report(landed: Landed) -> LandReport:
    """The table, its lineage's versions, and whether enough outputs were valid."""
    context, product, summary = landed.context, landed.product, landed.summary
    for doc_id, reason in sorted(summary.failed.items())[:20]:
        context.log.warning(f"brief of {doc_id}: {reason}")
    scores = (landed.review.scores or {}).get("candidate") or {}
    valid = scores.get("valid_share")
    store = product.store
    rows = store.count_rows(product.index) if store.has_table(product.index) else 0
    waiting = bool(summary.batches_pending) and not rows and not summary.failed
    metadata = {
        "dagster/uri": dg.MetadataValue.path(store.table_uri(product.index)),
        "dagster/row_count": rows,
        "dagster/column_schema": column_schema(
            brief_schema(product.output), BRIEF_COLUMN_DESCRIPTIONS
        ),
        **summary.metadata(),
        "prompt_version": product.template.version,
        "schema_version": product.output.version,
        "model_fingerprint": product.model.fingerprint,
    }
    valid_check = dg.AssetCheckResult(
        check_name=VALID_OUTPUTS,
        # nothing to judge while a provider still runs every request
        passed=waiting or (valid is not None and valid >= product.settings.min_valid_share),
        description="waiting for the provider's batches: nothing to judge yet" if waiting else None,
        metadata=as_metadata(
            {
                "valid_share": valid,
                "min_valid_share": product.settings.min_valid_share,
                "briefs_failed": len(summary.failed),
                "batches_pending": summary.batches_pending,
            },
            {"valid_share", "briefs_failed"},
        ),
    )
    return LandReport(metadata, [valid_check])


BRIEF_ASSETS = ProductAssets(
    stages=BRIEF_STAGES,
    open=_opened,
    group_name=BRIEFS_GROUP,
    resources=frozenset({"pipeline", "generation", "inference"}),
    engine=lambda context, partition: context.resources.generation.generator,
    columns=BRIEF_COLUMN_DESCRIPTIONS,
    descriptions={
        BRIEF_PREPARE.name: "The prompt of every document whose brief is stale (its content, "
        "the prompt file, the output schema, the sampling or the chat model changed): the "
        "shared system part and the document cut at briefs.document_tokens tokens. Reads the "
        "collection's own source_documents; a collection without briefs materialises nothing "
        "here.",
        BRIEF_PLAN.name: "Each prompt counted by the model's tokenizer, refused when it does "
        "not fit max_model_len with max_tokens (that document's failure), its KV footprint "
        "estimated, and put in a checkpointed chunk; the estimated peak KV use against the "
        "cache.",
        BRIEF_EXECUTE.name: "One output per planned prompt from the chat model on vLLM "
        "(continuous batching, prefix caching), streamed and constrained to the output schema; "
        "finished outputs are checkpointed every chunk_size outputs or 10 s, so a retry "
        "generates only what no checkpoint holds. An invalid or truncated output is kept with "
        "its reason and finish reason.",
        BRIEF_LAND.name: "One brief per document in the generation's LanceDB table "
        "(`<collection>_briefs__<fingerprint>`): the output schema's fields as typed columns, "
        "the raw output and finish reason, tokens, and lineage (content hash, prompt and "
        "schema versions, model fingerprint, run id, time). Valid outputs land in one commit "
        "that also deletes deleted documents' briefs. Then the generation is reviewed: it is "
        "promoted once it briefs every document, at least min_valid_share of its outputs are "
        "valid, and its audience accuracy and faithfulness are no worse than live's.",
    },
    charts=STAGE_CHARTS,
    stage_report=_stage_report,
    land_checks=(
        LandCheck(
            VALID_OUTPUTS,
            "At least briefs.min_valid_share (0.99 by default) of the generation's outputs "
            "are valid: finished and matching the output schema. Below it the generation is "
            "not promoted; `batch-pipeline failures` lists each document with its reason.",
            blocking=True,
        ),
    ),
    land_report=_land_report,
    land_charts=CHARTS,
    # after the index's own review, since faithfulness is measured against the live index
    land_deps=(INDEX_GENERATION,),
    freshness=dg.FreshnessPolicy.time_window(
        fail_window=timedelta(hours=26), warn_window=timedelta(hours=24)
    ),
    optional=True,
)


def _indexes_check(context: Context, health: IndexHealth) -> dg.AssetCheckResult:
    """The question tables' `indexes_current` result, their problems logged."""
    for problem in health.problems:
        context.log.warning(f"question index not current: {problem}")
    return dg.AssetCheckResult(
        check_name=INDEXES_CURRENT,
        passed=health.ok,
        metadata=as_metadata(health.metadata(), {"unindexed_rows"}),
    )


def build_brief_assets(
    partitions: dg.PartitionsDefinition, namespace: Namespace = SAMPLE
) -> list[dg.AssetsDefinition]:
    """The briefs' four stage assets from the builder (collect is the collection's own),
    and their question rows, their keys in `namespace`."""
    rows_key = namespace.key(QUESTION_ROWS)

    @dg.multi_asset(
        name=namespace.name(QUESTION_ROWS),
        specs=[
            dg.AssetSpec(
                rows_key,
                deps=[namespace.key(BRIEF_LAND.asset)],
                description=QUESTION_ROWS_DESCRIPTION,
                kinds={"lancedb"},
                group_name=BRIEFS_GROUP,
                skippable=True,  # nothing while briefs.index_questions is off
            )
        ],
        check_specs=[
            partition_check(
                INDEXES_CURRENT,
                rows_key,
                partitions,
                "Each question table carries every index the collection's index: settings ask "
                "for, each readable and lacking at most max_unindexed_rows rows, as this run's "
                "land left it under the table's landing lease; fails naming the index that is "
                "missing, damaged or behind, or whose build failed.",
            )
        ],
        can_subset=True,  # so the check, too, is skipped while the setting is off
        partitions_def=partitions,
        required_resource_keys=namespace.resource_keys(BRIEF_ASSETS.resources),
    )
    def question_rows(context: Context):  # noqa: ANN202 - a MaterializeResult, or nothing
        """The question rows' land (QUESTION_ROWS_DESCRIPTION), with its indexes check."""
        opened = _opened(context)
        product = opened[0] if opened is not None else None
        if product is None or not product.settings.index_questions:
            context.log.info(f"{context.partition_key}: briefs.index_questions is off")
            return
        if rows_key not in context.selected_asset_keys:
            # the check reads the indexes as the land leaves them, under its lease: it runs
            # with the land (Dagster 1.13 cannot run a partitioned check on its own anyway)
            context.log.info("indexes_current runs with the question rows' land")
            return
        result = product.land_questions(context.resources.inference.runner, context.run.run_id)
        context.log.info(f"question rows: {result.status}")
        table = {}
        if result.live_table is not None:
            table = {
                "dagster/uri": dg.MetadataValue.path(product.store.table_uri(result.live_table)),
                "dagster/row_count": result.live_rows,
            }
        yield dg.MaterializeResult(
            metadata={**table, **as_metadata(result.metadata(), QUESTION_CHARTS)},
            check_results=[_indexes_check(context, result.index_health)],
        )

    return [*build_product_assets(BRIEF_ASSETS, partitions, namespace), question_rows]
