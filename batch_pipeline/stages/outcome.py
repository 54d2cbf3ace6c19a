"""What every execute reports besides its family's own counts (`ExecuteOutcome`), whichever
family (embed, generate, score) and executor ran it: the inputs it failed, with why, and
those it took from checkpoints; what ran the plan where it is not the run's own engine; and,
on a provider, its prices, its batches, its completion window and the inputs it has not
answered yet. Each family's summary (`ExecuteSummary`, `GenerateSummary`, `ScoreSummary`)
builds on it, as the Batch API driver and the frame's landing read it alike.
"""

from dataclasses import dataclass, field

from batch_pipeline.stages.provider_batches import ProviderBatches


@dataclass(kw_only=True)
class ExecuteOutcome:
    """The counters every execute keeps (see the module docstring)."""

    failed_inputs: dict[str, str] = field(default_factory=dict)  # input_hash -> reason
    resumed_inputs: int = 0  # taken from checkpoints of an interrupted run
    executor: str | None = None  # what ran the plan, where it is not the run's own engine
    # a provider's: its batch prices per million input and output tokens, its batches, its
    # completion window, and the planned inputs it has not answered yet (in flight, or
    # unanswered twice): land keeps them pending, not failed
    token_prices: tuple[float, float] | None = None
    batches: ProviderBatches = field(default_factory=ProviderBatches)
    window_seconds: float | None = None
    unanswered: int = 0
