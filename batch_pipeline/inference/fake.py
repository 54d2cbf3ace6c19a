"""FAKE embedder for unit tests: deterministic vectors, no model, no torch.

NOT A MODEL. `FakeEmbedder` hashes each lower-cased word of a text into a signed coordinate
(feature hashing) and L2-normalises the sum, so identical texts get identical vectors and
texts sharing words are close. It lets tests of planning, landing, generations and the
sensors run in milliseconds. Paths where the model matters (inference, evaluation scores,
drift across dtypes, search quality) are tested with the real model.
"""

import re
import time
import zlib
from collections.abc import Iterable, Iterator

import numpy as np

from batch_pipeline.inference.embedder import RunStats
from batch_pipeline.inference.models import ResolvedModel

_WORDS = re.compile(r"\w+")


class FakeEmbedder:
    """A deterministic stand-in for `EmbeddingRunner` (see the module docstring)."""

    device = "fake"
    dtype = "float32"

    def __init__(self, model: ResolvedModel) -> None:
        self.resolved = model
        self.dimension = model.embedding_dimension
        self.texts_embedded = 0  # what tests assert on: did anything reach the "model"?

    def vector(self, text: str) -> np.ndarray:
        out = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORDS.findall(text.lower()) or [""]:
            code = zlib.crc32(word.encode())
            out[code % self.dimension] += 1.0 if code & 1 << 31 else -1.0
        norm = float(np.linalg.norm(out))
        if norm == 0.0:
            out[0] = norm = 1.0
        return out / norm

    def token_counts(self, texts: list[str]) -> list[int]:
        limit = self.resolved.max_seq_length
        return [min(len(_WORDS.findall(t)) + 2, limit) for t in texts]

    def run(
        self, batches: Iterable[tuple[list[int], list[str]]], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        stats = stats if stats is not None else RunStats()
        for positions, texts in batches:
            started = time.perf_counter()
            vectors = np.stack([self.vector(t) for t in texts])
            counts = self.token_counts(texts)
            stats.inputs += len(texts)
            stats.tokens += sum(counts)
            stats.padded_tokens += len(texts) * max(counts)
            stats.batches += 1
            stats.seconds += time.perf_counter() - started
            self.texts_embedded += len(texts)
            yield positions, vectors

    def embed(self, texts: list[str], *_: object, **__: object) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        (_, vectors), *_ = list(self.run([(list(range(len(texts))), list(texts))]))
        return vectors
