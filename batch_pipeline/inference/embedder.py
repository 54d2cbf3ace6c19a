"""What every stage and check needs from a model: the `Embedder` protocol.

`EmbeddingRunner` (the real sentence-transformers model) implements it, and so does
`FakeEmbedder` (a deterministic stand-in for unit tests). Stages, generations and checks are
typed against this protocol, never against the runner.
"""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from batch_pipeline.inference.models import ResolvedModel

# What `Embedder.run` takes: (positions, texts), or (positions, texts, token ids) where the
# plan carries each input's token ids from prepare (special tokens included), which a model
# pads instead of tokenising the texts again
PlannedBatch = tuple[list[int], list[str]] | tuple[list[int], list[str], Sequence[Sequence[int]]]


@dataclass
class RunStats:
    """What one run of batches did: inputs, tokens, padding, time, OOM splits, failures.

    `seconds` is the marginal time, spent embedding the inputs; what a run pays once whatever
    its size (choosing the dtype, the first call's warm-up) is counted apart, so a small run's
    rate is not its start-up divided by a few inputs."""

    inputs: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    batches: int = 0
    seconds: float = 0.0  # embedding the inputs: the marginal time
    calibration_seconds: float = 0.0  # fixed: measuring the paths `auto` chooses between
    warmup_seconds: float = 0.0  # fixed: the model's first call (kernels, allocator, caches)
    oom_splits: int = 0
    tokenized: int = 0  # inputs tokenised here: given no token ids, or ids it could not pad
    failed: dict[int, str] = field(default_factory=dict)  # position -> reason

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@runtime_checkable
class Embedder(Protocol):
    """A loaded model that turns texts into vectors."""

    resolved: ResolvedModel
    device: str
    dtype: str
    backend: str  # what runs the model: torch, openvino (or a fake)
    dimension: int
    calibrating: bool  # whether `auto` still has a path to choose (see `calibrate`)

    def calibrate(self, texts: list[str]) -> object:
        """Choose `auto`'s path on a sample of the run's inputs, before it starts; a run that
        skips this calibrates on its first inputs."""
        ...

    def run(
        self, batches: Iterable[PlannedBatch], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """Embed `(positions, texts)` or `(positions, texts, token_ids)` batches; yield
        `(positions, vectors)` per batch."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts in input order; an array of shape (len(texts), dimension)."""
        ...
