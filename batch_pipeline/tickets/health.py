"""The ticket product in `batch-pipeline status` and `doctor`: days classified against the days
due, the latest day's mix, failing rows, the last run, the generations and the table's health.

A day is due from `tickets.start_date` to yesterday (the Dagster partitions); it counts as
classified when the live generation holds rows for it. Reads the live table and the tracking
store; `doctor` also checks that the export can be read.
"""

from datetime import date

from batch_pipeline.health.freshness import utc_time
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.tickets.mix import IntentMix
from batch_pipeline.tickets.pipeline import TicketProduct

MISSING_DAYS_SHOWN = 5  # the text output names at most this many missing days


def _days(product: TicketProduct, today: date | None) -> tuple[list[str], list[str]]:
    """The days due, and those the live generation holds."""
    live = product.live()
    held = product.intents.days(live.index_name) if live else []
    return product.partition_days(today), held


def product_status(product: TicketProduct, today: date | None = None) -> dict[str, object]:
    """Days classified and missing, tickets, the latest day's unknown rate, failing rows,
    the last run, and the current configuration's generation against the live one."""
    live = product.live()
    reader = live.index_name if live else None
    due, held = _days(product, today)
    missing = sorted(set(due) - set(held))
    latest = held[-1] if held else None
    mix = None
    if latest is not None:
        rows = product.intents.day_rows(reader, latest, ["intent", "confidence"])
        mix = IntentMix.of(rows["intent"].to_pylist(), rows["confidence"].to_pylist())
    table = product.store.open(reader) if reader else None
    last = product.tracking.last_run(reader) if reader else None
    current = product.registry.get(product.name, product.fingerprint)
    return {
        "collection": product.name,
        "kind": "ticket_intents",
        "live_table": reader,
        "generation": product.index,
        "generation_state": current.state if current else "not built",
        "start_date": product.settings.start_date,
        "days_due": len(due),
        "days_classified": len(set(held) & set(due)),
        "missing_days": missing,
        "tickets": table.count_rows() if table is not None else 0,
        "latest_day": latest,
        "latest_day_tickets": mix.total if mix else None,
        "latest_day_unknown_rate": round(mix.unknown_rate, 4)
        if mix and mix.unknown_rate is not None
        else None,
        "failing_tickets": product.tracking.failure_count(reader) if reader else 0,
        "last_run_id": last["run_id"] if last else None,
        "last_landed_at": utc_time(last["finished_at"]) if last else None,
        "model": product.model.name,
        "source_error": None,
    }


def product_health(product: TicketProduct, today: date | None = None) -> dict[str, object]:
    """What `doctor` reports: whether the export can be read, every due day is classified
    under the live generation, and the live table's size, versions and fragments."""
    live = product.live()
    reader = live.index_name if live else None
    due, held = _days(product, today)
    missing = sorted(set(due) - set(held))
    try:
        product.export.check()
        source_error = None
    except SourceUnavailableError as error:
        source_error = str(error)
    table = product.store.open(reader) if reader else None
    health: dict[str, object] = {
        "collection": product.name,
        "kind": "ticket_intents",
        "source_error": source_error,
        "live_table": reader,
        "days_due": len(due),
        "days_classified": len(set(held) & set(due)),
        "missing_days": missing,
        "table_rows": table.count_rows() if table is not None else 0,
        "table_version": table.version if table is not None else None,
        "table_versions": len(table.list_versions()) if table is not None else 0,
        "table_fragments": product.store.fragment_count(reader) if reader else 0,
        "failing_tickets": product.tracking.failure_count(reader) if reader else 0,
    }
    problems = [f"source unavailable: {source_error}"] if source_error else []
    if live is None:
        problems.append(
            "no live generation yet: classify a day (batch-pipeline run --day YYYY-MM-DD)"
        )
    elif missing:
        problems.append(
            f"{len(missing)} of {len(due)} due days not classified under the live generation: "
            f"{missing_days_text(missing)} (a day whose export is there: batch-pipeline run "
            "--day D, or a backfill of ticket_intents_job)"
        )
    health["problems"] = problems
    health["healthy"] = not problems
    return health


def missing_days_text(missing: list[str]) -> str:
    """The first few missing days, and how many more."""
    shown = ", ".join(missing[:MISSING_DAYS_SHOWN])
    more = len(missing) - MISSING_DAYS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")
