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
    # found at the provider and taken up: batches whose creation answered an error, or was
    # cut off, though the provider had created them
    adopted: list[str] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)  # gone at the provider: sent again
    # of those, the ones sent to another api_base than this run's: they may still run there
    elsewhere: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)  # cancelled there: this run sends no more
    unreadable_lines: int = 0  # answer lines that were not JSON, or named no request
    # requests the provider's validation refused (a batch failed naming their lines): their
    # inputs' failures, the rest of their batch sent again
    refused_requests: int = 0
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
            "batches_adopted": self.adopted,
            "batches_given_up": self.given_up,
            "batches_given_up_elsewhere": self.elsewhere,
            "batches_cancelled": self.cancelled,
            "unreadable_answer_lines": self.unreadable_lines,
            "requests_refused": self.refused_requests,
            "submitted_by": self.submitted_by,
            "submitted_at": self.submitted_at,
        }

    def metadata(self) -> dict[str, object]:
        """Counts for the UI, only when the run spoke to a provider at all."""
        if not (self.submitted or self.collected or self.pending or self.given_up):
            return {}
        return {
            "batches_submitted": len(self.submitted),
            "batches_collected": len(self.collected),
            "batches_pending": self.pending,
            "batches_given_up": len(self.given_up),
            "batches_cancelled": len(self.cancelled),
            "unreadable_answer_lines": self.unreadable_lines,
            "requests_refused": self.refused_requests,
        }

    def lines(self, unit: str) -> list[str]:
        """What went wrong with the provider's batches, one line each, for the run's output:
        batches given up, cancelled at the provider, adopted, unreadable answer lines."""
        lines = []
        if self.given_up:
            lines.append(
                f"  {len(self.given_up)} provider batch(es) given up, the provider no longer "
                f"having them ({', '.join(self.given_up)}): their {unit} were sent again"
            )
        if self.elsewhere:
            lines.append(
                f"  provider batch(es) {', '.join(self.elsewhere)} had been sent to another "
                "api_base, where they may still run and bill: `batch-pipeline batches` says "
                "where; cancel them there (batches drop ID --yes --api-base ADDRESS)"
            )
        if self.cancelled:
            lines.append(
                f"  provider batch(es) {', '.join(self.cancelled)} cancelled at the provider: "
                f"what they answered landed; this run sent nothing more (the next run sends "
                f"the {unit} still unanswered)"
            )
        if self.adopted:
            lines.append(
                f"  provider batch(es) {', '.join(self.adopted)} found at the provider though "
                "their creation had not answered: collected, not created again"
            )
        if self.refused_requests:
            lines.append(
                f"  {self.refused_requests} request(s) refused by the provider's validation of "
                f"their batch: their {unit} failed (see `failures`); the rest of the batch was "
                "sent again"
            )
        if self.unreadable_lines:
            lines.append(
                f"  {self.unreadable_lines} answer line(s) from the provider could not be read "
                f"(not JSON, or naming no request): their {unit} failed or wait for the next run"
            )
        return lines
