"""What an execute did with a provider's batches (the `openai-batch` executors of every model
family): the batches it submitted and collected, how many were still running when it
returned, and the earliest other run whose batches it collected. Execute writes this into
its output's footer; the frame's landing reads `submitted_by` to record the submitting and
the collecting run as one run, and land reads `pending` to keep what the provider has not
answered yet pending rather than failed."""

from dataclasses import dataclass, field


@dataclass
class ProviderBatches:
    """One execute's provider batches (see the module docstring)."""

    submitted: list[str] = field(default_factory=list)  # provider batch ids
    collected: list[str] = field(default_factory=list)
    pending: int = 0  # still running at the provider when execute returned
    # the earliest other run whose provider batches this run collected, and when it submitted
    submitted_by: str | None = None
    submitted_at: float | None = None

    def collected_from(self, run_id: str, submitted_at: float) -> None:
        """Note a collected batch that `run_id` submitted at `submitted_at`: the run lands
        as that run's continuation (`runs.landing`)."""
        if self.submitted_at is None or submitted_at < self.submitted_at:
            self.submitted_by, self.submitted_at = run_id, submitted_at

    def record(self) -> dict[str, object]:
        """The footer's entries (`ExecuteSummary.record`, `GenerateSummary.record`)."""
        return {
            "batches_submitted": self.submitted,
            "batches_collected": self.collected,
            "pending_batches": self.pending,
            "submitted_by": self.submitted_by,
            "submitted_at": self.submitted_at,
        }

    def metadata(self) -> dict[str, object]:
        """Counts for the UI, only when the run spoke to a provider at all."""
        if not (self.submitted or self.collected or self.pending):
            return {}
        return {
            "batches_submitted": len(self.submitted),
            "batches_collected": len(self.collected),
            "batches_pending": self.pending,
        }
