"""What a Dagster run tells the engine about itself: its trigger, its start and its retries."""

import dagster as dg

from batch_pipeline.triggers.tags import trigger_of

RUN_RETRY_TAG = "dagster/retry_number"  # set on a run that re-executes a failed one


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
