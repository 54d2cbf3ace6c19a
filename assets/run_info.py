"""What a Dagster run tells the engine about itself: its trigger, its start, its retries, and
what the operator confirmed (`LandConfig`)."""

import dagster as dg
from pydantic import Field

from assets.stage_io import as_metadata
from batch_pipeline.declaration import Product, review_after_run
from batch_pipeline.generations.review import EmbedderFor, GenerationReview
from batch_pipeline.triggers.tags import is_nightly, trigger_of

RUN_RETRY_TAG = "dagster/retry_number"  # set on a run that re-executes a failed one
NO_MASS_DELETION_HELD = "no_mass_deletion_held"


class LandConfig(dg.Config):
    allow_mass_delete: bool = Field(
        default=False,
        description="Confirm deletions beyond limits.max_delete_fraction and "
        "limits.max_delete_documents; without it they are held back and a check fails.",
    )


def run_trigger(context: dg.AssetExecutionContext) -> str:
    """backfill, sensor, schedule or manual (see `trigger_of`)."""
    return trigger_of(context.run.tags)


def run_started_at(context: dg.AssetExecutionContext) -> float | None:
    """When the Dagster run started (its worker included); None if not recorded."""
    record = context.instance.get_run_record_by_id(context.run.run_id)
    return record.start_time if record is not None else None


def step_retries(context: dg.AssetExecutionContext) -> int:
    """Steps of this run retried so far (each restart counts), plus the run's own retry
    number when it re-executes a failed run."""
    restarts = context.instance.get_records_for_run(
        context.run.run_id, of_type=dg.DagsterEventType.STEP_RESTARTED
    ).records
    return len(restarts) + int(context.run.tags.get(RUN_RETRY_TAG, 0))


def held_deletions_check(
    context: dg.AssetExecutionContext, deletions_held: int, reason: str | None
) -> dg.AssetCheckResult:
    """The `no_mass_deletion_held` check of a land, and a warning in the log when it fails."""
    if deletions_held:
        context.log.warning(
            f"held back {deletions_held} deletions: {reason}; "
            "materialise with allow_mass_delete: true to confirm them"
        )
    return dg.AssetCheckResult(
        check_name=NO_MASS_DELETION_HELD,
        passed=not deletions_held,
        metadata=as_metadata({"deletions_held": deletions_held, "reason": reason}),
    )


def nightly_review(
    context: dg.AssetExecutionContext, product: Product, embedder_for: EmbedderFor
) -> tuple[GenerationReview, list[str]]:
    """The product's generation review after a land, and the retired generations dropped: a
    nightly run (the reconciliation, or the product's daily schedule) forces the review and
    drops what is past `generations.retention_days` (`declaration.review_after_run`, which
    `run --trigger schedule` takes too)."""
    return review_after_run(product, embedder_for, nightly=is_nightly(context.run.tags))
