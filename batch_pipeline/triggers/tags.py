"""The run tags that say what started a run and in which mode; one spelling for everything
that writes or reads them (sensors, the schedule, the assets, reports)."""

from batch_pipeline.measures.run import BACKFILL, MANUAL, SCHEDULE, SENSOR

TRIGGER_TAG = "batch_pipeline/trigger"
MODE_TAG = "batch_pipeline/mode"

RECONCILE_MODE = "reconcile"  # a full pass plus table maintenance (the nightly run)

PUBLISH_SENSOR = "publish_sensor"  # a targeted run of changed documents
PUBLISH_SENSOR_FULL = "publish_sensor_full"  # a full pass (first tick, or a reset cursor)
NIGHTLY_SCHEDULE = "nightly_schedule"


def publish_tags(full: bool) -> dict[str, str]:
    return {TRIGGER_TAG: PUBLISH_SENSOR_FULL if full else PUBLISH_SENSOR}


def nightly_tags() -> dict[str, str]:
    return {MODE_TAG: RECONCILE_MODE, TRIGGER_TAG: NIGHTLY_SCHEDULE}


def is_reconcile(tags: dict[str, str]) -> bool:
    """Whether a run's tags ask for the nightly reconciliation's table maintenance."""
    return tags.get(MODE_TAG) == RECONCILE_MODE


def is_nightly(tags: dict[str, str]) -> bool:
    """Whether a run is a product's nightly one (the reconciliation, or a product's own daily
    schedule): every product forces its generation review then and drops retired
    generations past retention."""
    return is_reconcile(tags) or DAGSTER_SCHEDULE_TAG in tags


# Dagster's own tags on runs that a backfill, a sensor or a schedule launched.
DAGSTER_BACKFILL_TAG = "dagster/backfill"
DAGSTER_SENSOR_TAG = "dagster/sensor_name"
DAGSTER_SCHEDULE_TAG = "dagster/schedule_name"


def trigger_of(tags: dict[str, str]) -> str:
    """What started a run, as its measures record it: backfill, sensor, schedule or manual."""
    if DAGSTER_BACKFILL_TAG in tags:
        return BACKFILL
    trigger = tags.get(TRIGGER_TAG)
    if trigger in (PUBLISH_SENSOR, PUBLISH_SENSOR_FULL) or DAGSTER_SENSOR_TAG in tags:
        return SENSOR
    if trigger == NIGHTLY_SCHEDULE or DAGSTER_SCHEDULE_TAG in tags:
        return SCHEDULE
    return MANUAL
