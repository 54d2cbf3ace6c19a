"""The score family: a `Scorer` takes (query, document) pairs and returns one score each, in
the pairs' order, as a reranker scores them (higher: more relevant).

Every scorer batches the same way (`BatchedScorer`): the pairs' token counts (the pair as
the reranker's tokenizer encodes it, cut at its `max_length`) packed under a padded-token
budget, shortest first (`inference.batching.pack_batches`), so a long document pays for its
own batch. They differ only in the engine that scores a batch:

- `CrossEncoderScorer` (`inference.cross_encoder`): sentence-transformers' `CrossEncoder` in
  the run's process (torch);
- `VllmScorer` (`inference.vllm_scorer`): vLLM's `LLM.score` on the same folder, as a
  pooling model;
- the judge (`inference.judge`): a chat model's yes or no.

The two give the same scores (the model's one logit through a sigmoid) to within float
rounding, so a reranker's generation does not depend on which ran it.
"""

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from batch_pipeline.inference.batching import PlanSettings, pack_batches
from batch_pipeline.inference.rerankers import ResolvedReranker

Pair = tuple[str, str]  # (query, document)


@dataclass
class ScoreStats:
    """What one scorer's calls did: pairs, their tokens, batches and the marginal seconds (the
    engine's load counted apart)."""

    pairs: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds if self.seconds else 0.0


class Scorer(Protocol):
    """Scores (query, document) pairs with a reranker (see the module docstring)."""

    reranker: ResolvedReranker
    backend: str  # what runs the model: sentence-transformers, vllm
    device: str  # where: what a run's execute seconds are priced by
    stats: ScoreStats
    load_seconds: float

    def score(self, pairs: Sequence[Pair]) -> np.ndarray:
        """One float32 score per pair, in the pairs' order."""
        ...

    def score_batch(self, pairs: list[Pair]) -> np.ndarray:
        """One planned batch's scores, as given (a plan's batches are already packed)."""
        ...

    def run(self, batches: Iterable[list[Pair]]) -> Iterator[np.ndarray]:
        """Each planned batch's scores, in the batches' order."""
        ...


class BatchedScorer:
    """The batching every scorer shares: token counts, packed batches, scores put back in
    the pairs' order; a subclass scores one batch (`score_batch`)."""

    backend = "none"
    device = "cpu"

    def __init__(self, reranker: ResolvedReranker, settings: PlanSettings | None = None) -> None:
        self.reranker = reranker
        self.settings = settings or PlanSettings()
        self.stats = ScoreStats()
        self.load_seconds = 0.0
        self._tokenizer = None

    def tokenizer(self):  # noqa: ANN201 - a transformers tokenizer
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.reranker.path))
        return self._tokenizer

    def token_counts(self, pairs: Sequence[Pair]) -> list[int]:
        """Each pair's tokens as the reranker encodes it, cut at its `max_length`."""
        if not pairs:
            return []
        encoded = self.tokenizer()(
            [q for q, _ in pairs],
            [d for _, d in pairs],
            truncation="longest_first",
            max_length=self.reranker.max_length,
        )
        return [len(ids) for ids in encoded["input_ids"]]

    def score(self, pairs: Sequence[Pair]) -> np.ndarray:
        scores = np.zeros(len(pairs), dtype=np.float32)
        counts = self.token_counts(pairs)
        for batch in pack_batches(counts, self.settings):
            started = time.perf_counter()
            found = self.score_batch([pairs[i] for i in batch.indices])
            self.stats.seconds += time.perf_counter() - started
            scores[batch.indices] = found
            self.stats.pairs += len(batch.indices)
            self.stats.tokens += sum(counts[i] for i in batch.indices)
            self.stats.padded_tokens += batch.padded_tokens
            self.stats.batches += 1
        return scores

    def score_batch(self, pairs: list[Pair]) -> np.ndarray:
        """One planned batch's scores, as given (no re-batching), in its order."""
        raise NotImplementedError

    def run(self, batches: Iterable[list[Pair]]) -> Iterator[np.ndarray]:
        """Each planned batch scored as it comes."""
        for pairs in batches:
            yield self.score_batch(pairs)
