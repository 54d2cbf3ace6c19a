"""The provider's batches as `status`, `doctor` and `batches` show them: those in flight,
those stuck (in flight past their completion window, or recorded before a creation that
never answered for longer than a run takes to settle it), and those that ended without all
their answers (given up, dropped, cancelled, failed, or with lines that could not be read)."""

import time
from collections.abc import Iterable
from dataclasses import dataclass

from batch_pipeline.names import generation_product
from batch_pipeline.state.tracking import ProviderBatch, TrackingStore

DEFAULT_WINDOW_SECONDS = 24 * 3600.0  # the Batch API's completion window, unless told
GRACE_SECONDS = 3600.0  # past the window before a batch in flight counts as stuck
RECENT_SECONDS = 7 * 24 * 3600.0  # how far back ended batches are shown


@dataclass(frozen=True)
class BatchView:
    """One recorded batch, as shown."""

    batch: ProviderBatch
    product: str
    stuck: bool
    age_seconds: float

    @property
    def ended_badly(self) -> bool:
        """Collected without all its answers: given up, dropped, cancelled, failed, or with
        a note of unreadable lines."""
        b = self.batch
        return b.collected_at is not None and (b.status != "completed" or bool(b.note))

    def line(self) -> str:
        b = self.batch
        sent = f", sent to {b.api_base}" if b.api_base else ""
        where = f"{b.batch_id} ({self.product}, {b.partition}, {b.requests} requests{sent})"
        if b.collected_at is None:
            state = "being created" if b.creating else b.status
            line = f"{where}: {state} for {hours(self.age_seconds)}"
            if self.stuck:
                line += (
                    "; stuck: past its completion window (batch-pipeline batches drop "
                    f"{b.batch_id} --yes gives it up, and the next run sends its requests again)"
                )
            return line
        said = f": {b.note}" if b.note else ""
        return f"{where}: {b.status}{said}"

    def as_dict(self) -> dict[str, object]:
        b = self.batch
        return {
            "batch_id": b.batch_id,
            "product": self.product,
            "partition": b.partition,
            "status": b.status,
            "requests": b.requests,
            "submitted_by": b.run_id,
            "submitted_at": b.submitted_at,
            "collected_at": b.collected_at,
            "in_flight": b.collected_at is None,
            "stuck": self.stuck,
            "note": b.note,
            "api_base": b.api_base,
        }


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def batch_views(
    tracking: TrackingStore,
    window_seconds: float = DEFAULT_WINDOW_SECONDS,
    now: float | None = None,
) -> list[BatchView]:
    """Every batch in flight and every one that ended badly in the last week, oldest first."""
    now = time.time() if now is None else now
    views = []
    for batch in tracking.recent_provider_batches(since=now - RECENT_SECONDS):
        age = now - batch.submitted_at
        flying = batch.collected_at is None
        stuck = flying and (
            age > window_seconds + GRACE_SECONDS or (batch.creating and age > GRACE_SECONDS)
        )
        view = BatchView(batch, generation_product(batch.generation), stuck, age)
        if flying or view.ended_badly:
            views.append(view)
    return views


def of_product(views: Iterable[BatchView], product: str) -> list[BatchView]:
    return [v for v in views if v.product == product]


def status_lines(views: list[BatchView]) -> list[str]:
    """`status`'s lines: how many in flight and stuck, each stuck one and each ended badly."""
    if not views:
        return []
    flying = [v for v in views if v.batch.collected_at is None]
    stuck = [v for v in flying if v.stuck]
    ended = [v for v in views if v.ended_badly]
    head = f"provider batches: {len(flying)} in flight"
    if flying:
        head += f" (the oldest for {hours(max(v.age_seconds for v in flying))})"
    head += f", {len(stuck)} stuck, {len(ended)} ended without all their answers this week"
    return [head, *(f"  {v.line()}" for v in (*stuck, *ended))]


def problems(views: Iterable[BatchView]) -> list[str]:
    """`doctor`'s problems: each stuck batch."""
    return [f"provider batch {v.line()}" for v in views if v.stuck]
