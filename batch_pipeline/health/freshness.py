"""Per-partition freshness: how far the index lags behind its source."""

import time
from datetime import UTC, datetime

from batch_pipeline.state.tracking import TrackingStore


def utc_time(timestamp: float | None) -> datetime | None:
    """An epoch timestamp as a UTC datetime (None stays None)."""
    return datetime.fromtimestamp(timestamp, UTC) if timestamp else None


def partition_freshness(
    tracking: TrackingStore,
    index: str,
    now: float | None = None,
    also_pending: dict[str, float | None] | None = None,
) -> dict[str, object]:
    """The newest source change landed, the oldest not yet landed, and the lag in seconds.

    Pending changes are recorded by the publish sensor and by every collect; a landed (or
    failed and recorded) document settles them. `also_pending` adds changes just found by
    looking at the source (`batch-pipeline status`). Nothing pending means a lag of 0.
    """
    now = time.time() if now is None else now
    facts = tracking.freshness(index)
    times = [t for t in (also_pending or {}).values() if t] + [facts["oldest_pending"]]
    oldest = min((t for t in times if t), default=None)
    return {
        "newest_source_change_landed": utc_time(facts["newest_landed"]),
        "oldest_source_change_pending": utc_time(oldest),
        "pending_documents": max(facts["pending"], len(also_pending or {})),
        "lag_seconds": round(max(0.0, now - oldest), 1) if oldest else 0.0,
    }


def worst_lag(
    tracking: TrackingStore, generations: dict[str, str], now: float | None = None
) -> tuple[float, str | None]:
    """The largest lag of any collection, and that collection (`generations` maps each
    collection to the generation its configuration builds). (0.0, None) without any."""
    lags = [
        (partition_freshness(tracking, index, now)["lag_seconds"], collection)
        for collection, index in generations.items()
    ]
    return max(lags, default=(0.0, None))
