"""How stage assets find each other's Parquet files and describe them in the UI.

Each stage records the file it wrote as `dagster/uri` on its materialisation; the next stage
reads the latest materialisation of the same partition. So a stage re-run on its own (or a
retry from failure in a new run) reads exactly what its upstream last produced.
"""

from collections.abc import Collection
from datetime import datetime

import dagster as dg
import pyarrow as pa

from batch_pipeline.stages import Stage
from batch_pipeline.stages.columns import COLUMN_DESCRIPTIONS
from batch_pipeline.state.staging import StagePath, StagingArea, parquet_file


class MissingUpstreamError(dg.Failure):
    """A stage ran before its upstream stage materialised this partition (or its file is
    gone). Retrying cannot help, so the retry policy is bypassed: the step fails once, with
    what to materialise first."""

    def __init__(self, description: str) -> None:
        super().__init__(description=description, allow_retries=False)


def upstream_path(
    context: dg.AssetExecutionContext, stage: Stage, staging: StagingArea
) -> StagePath:
    """The stage file `stage` last wrote for this partition: its asset is beside this one,
    under the same key prefix (the component's namespace)."""
    asset_key = dg.AssetKey([*context.asset_key.path[:-1], stage.asset])
    result = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[context.partition_key]),
        limit=1,
    )
    if not result.records:
        raise MissingUpstreamError(
            f"{asset_key.to_user_string()} has no materialisation for partition "
            f"{context.partition_key!r}; materialise it first (launch the job of this "
            "product for the partition, which runs every stage)"
        )
    materialization = result.records[0].asset_materialization
    uri = materialization.metadata.get("dagster/uri") if materialization else None
    if uri is None:
        raise MissingUpstreamError(f"{asset_key.to_user_string()} recorded no dagster/uri")
    try:
        path = staging.locate(str(uri.value))
    except ValueError as error:
        raise MissingUpstreamError(
            f"{error}: the staging location changed since {asset_key.to_user_string()} ran; "
            "re-materialise the upstream stage"
        ) from None
    if not path.is_file():
        raise MissingUpstreamError(
            f"{path} from {asset_key.to_user_string()} no longer exists (staging was pruned); "
            "re-materialise the upstream stage"
        )
    return path


def column_schema(
    schema: pa.Schema, descriptions: dict[str, str] = COLUMN_DESCRIPTIONS
) -> dg.TableSchema:
    """`dagster/column_schema`: each column's name, type and what it holds, from the product's
    own descriptions (the vector index's by default)."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name=f.name, type=str(f.type), description=descriptions.get(f.name))
            for f in schema
        ]
    )


# The numbers that deserve a chart: about ten per asset, the measures first. Each asset names
# its own (`charts=`); any other number it records (a constant, a setting, a detail of one run)
# is shown as text, so the Plots view is not a wall of flat lines. A run's own rates
# (`inputs_per_second`, `cost_per_1k_inputs`, execute's `tokens_per_second`) are text too: a
# one-page run's rate is mostly its batch of one and would read as a regression; the charted
# rates are the rolling ones, totals over the generation's recent runs. A name ending in `*`
# charts every key that starts with it (review scores are named by their cut-off, `_at_5`).
STAGE_CHARTS: dict[str, frozenset[str]] = {
    # source_documents, ticket_exports
    "collect": frozenset(
        {
            "dagster/row_count",
            "documents_new",
            "documents_changed",
            "documents_deleted",
            "documents_failed",
            "bytes_read",
            "tickets",
            "tickets_failed",
        }
    ),
    # document_chunks, ticket_inputs
    "prepare": frozenset(
        {
            "dagster/row_count",
            "documents_prepared",
            "documents_failed",
            "chunks_total",
            "chunks_to_embed",
            "chunks_to_remove",
            "tokens_to_embed",
            "inputs",
            "inputs_needing_vectors",
            "vectors_reused",
            "inputs_truncated",
        }
    ),
    # batch_plan, ticket_batch_plan
    "plan": frozenset(
        {
            "dagster/row_count",
            "inputs_planned",
            "batch_count",
            "batch_size_median",
            "real_tokens",
            "padding_efficiency",
            "largest_batch_estimated_mib",
        }
    ),
    # chunk_embeddings, ticket_embeddings
    "execute": frozenset(
        {
            "dagster/row_count",
            "inputs_embedded",
            "tokens",
            "seconds",
            "fixed_seconds",
            "model_load_seconds",
            "padding_efficiency",
            "batches_run",
        }
    ),
}
# What every land charts: the run's measures, and the generation's rolling rates.
RUN_CHARTS = frozenset(
    {
        "dagster/row_count",
        "rolling_inputs_per_second",
        "rolling_tokens_per_second",
        "rolling_cost_per_1k_inputs",
        "execute_fixed_seconds",
        "run_wall_seconds",
        "window_used_fraction",
        "failure_rate",
        "step_retries",  # 0 on a healthy run: the retry rate's plot has no gaps
    }
)
# Counts that are zero by design, recorded only when they are not: no chart of zeros.
ONLY_WHEN_NONZERO = frozenset(
    {
        "inputs_resumed_from_checkpoint",
        "oom_splits",
        "inputs_tokenized",
        "documents_quarantined",
        "tickets_quarantined",
        "deletions_held",
        "documents_superseded",
        "chunks_superseded",
        "chunks_resumed",
        "inputs_failed",
    }
)


def is_charted(key: str, charts: Collection[str]) -> bool:
    """Does `key` get a chart in the Plots view of an asset that charts `charts`?"""
    return key in charts or any(c.endswith("*") and key.startswith(c[:-1]) for c in charts)


def _as_text(value: int | float) -> dg.MetadataValue:
    """`1,013`, `0.000134`, `25,354.2`: grouped digits, never e-notation."""
    if isinstance(value, int):
        return dg.MetadataValue.text(f"{value:,}")
    return dg.MetadataValue.text(f"{value:,.6f}".rstrip("0").rstrip("."))


def as_metadata(values: dict[str, object], charts: Collection[str] = ()) -> dict[str, object]:
    """Engine figures as Dagster metadata: times as timestamps (the UI shows dates), missing
    values left out (rather than the text "null"), the numbers in `charts` as numbers (the
    UI plots them), every other number as text, and counts that are zero by design only when
    they are not; everything else as it is."""
    out: dict[str, object] = {}
    for key, value in values.items():
        if value is None or (key in ONLY_WHEN_NONZERO and value == 0):
            continue
        if isinstance(value, datetime):
            out[key] = dg.MetadataValue.timestamp(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value if is_charted(key, charts) else _as_text(value)
        else:
            out[key] = value
    return out


def parquet_metadata(
    path: StagePath, descriptions: dict[str, str] = COLUMN_DESCRIPTIONS
) -> dict[str, object]:
    """`dagster/uri`, `dagster/row_count` and `dagster/column_schema` of a stage file, its
    columns described by the product's own descriptions."""
    meta = parquet_file(path).metadata
    return {
        "dagster/uri": dg.MetadataValue.path(path.uri),
        "dagster/row_count": meta.num_rows,
        "dagster/column_schema": column_schema(meta.schema.to_arrow_schema(), descriptions),
    }
