"""Per-partition freshness: how far the index lags behind its source."""

import time
from datetime import UTC, datetime

from batch_pipeline.tracking import TrackingStore


def _iso(timestamp: float | None) -> str | None:
    return datetime.fromtimestamp(timestamp, UTC).isoformat() if timestamp else None


def partition_freshness(
    tracking: TrackingStore, collection: str, now: float | None = None
) -> dict[str, object]:
    """The newest source change landed, the oldest not yet landed, and the lag in seconds.

    Pending changes are recorded by the publish sensor and by every collect; a landed (or
    failed and recorded) document settles them. Nothing pending means a lag of 0.
    """
    now = time.time() if now is None else now
    facts = tracking.freshness(collection)
    oldest = facts["oldest_pending"]
    return {
        "newest_source_change_landed": _iso(facts["newest_landed"]),
        "oldest_source_change_pending": _iso(oldest),
        "pending_documents": facts["pending"],
        "lag_seconds": round(max(0.0, now - oldest), 1) if oldest else 0.0,
    }
