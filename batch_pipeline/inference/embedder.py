"""What every stage and check needs from a model: the `Embedder` protocol.

`EmbeddingRunner` (the real sentence-transformers model) implements it, and so does
`FakeEmbedder` (a deterministic stand-in for unit tests). Stages, generations and checks are
typed against this protocol, never against the runner.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from batch_pipeline.inference.models import ResolvedModel


@dataclass
class RunStats:
    """What one run of batches did: inputs, tokens, padding, time, OOM splits, failures."""

    inputs: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    batches: int = 0
    seconds: float = 0.0
    oom_splits: int = 0
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
    dimension: int

    def run(
        self, batches: Iterable[tuple[list[int], list[str]]], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """Embed `(positions, texts)` batches; yield `(positions, vectors)` per batch."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts in input order; an array of shape (len(texts), dimension)."""
        ...
