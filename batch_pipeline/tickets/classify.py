"""The intent classifier: cosine similarity of a ticket's vector to each intent's prototype.

An intent's prototype is its description's vector plus the mean of its examples' vectors,
normalised: the description weighs as much as all examples together, so an intent is what its
description says (a taxonomy whose descriptions were shuffled between intents scores badly,
and the gate refuses it). A ticket whose best score is below `min_confidence`, or within
`min_margin` of the second best, is `unknown`.
"""

from dataclasses import dataclass

import numpy as np

from batch_pipeline.config.taxonomy import UNKNOWN, Taxonomy
from batch_pipeline.inference.embedder import Embedder

TOP_K = 3


@dataclass(frozen=True)
class Prediction:
    intent: str  # an intent's name, or `unknown`
    confidence: float  # the best cosine score
    top: tuple[tuple[str, float], ...]  # the best TOP_K intents with their scores


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def embed_prototypes(taxonomy: Taxonomy, embedder: Embedder, prefix: str = "") -> np.ndarray:
    """One normalised prototype per intent, in taxonomy order (one forward pass in all)."""
    texts = [prefix + text for i in taxonomy.intents for text in (i.description, *i.examples)]
    vectors = _normalised(np.asarray(embedder.embed(texts), dtype=np.float32))
    prototypes, at = [], 0
    for intent in taxonomy.intents:
        description, examples = vectors[at], vectors[at + 1 : at + 1 + len(intent.examples)]
        at += 1 + len(intent.examples)
        prototypes.append(description + examples.mean(axis=0) if len(examples) else description)
    return _normalised(np.stack(prototypes))


class IntentClassifier:
    def __init__(
        self,
        names: list[str],
        prototypes: np.ndarray,
        min_confidence: float,
        min_margin: float,
    ) -> None:
        if len(names) != len(prototypes):
            raise ValueError("one prototype per intent")
        self.names = list(names)
        self.prototypes = _normalised(np.asarray(prototypes, dtype=np.float32))
        self.min_confidence = min_confidence
        self.min_margin = min_margin

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        """Cosine similarity of each vector to each prototype: (len(vectors), intents)."""
        vectors = _normalised(
            np.asarray(vectors, dtype=np.float32).reshape(-1, self.prototypes.shape[1])
        )
        return vectors @ self.prototypes.T

    def classify(self, vectors: np.ndarray) -> list[Prediction]:
        predictions = []
        for row in self.scores(vectors):
            order = np.argsort(-row, kind="stable")[:TOP_K]
            top = tuple((self.names[i], round(float(row[i]), 4)) for i in order)
            best = top[0][1]
            margin = best - top[1][1] if len(top) > 1 else best
            clear = best >= self.min_confidence and margin >= self.min_margin
            predictions.append(Prediction(top[0][0] if clear else UNKNOWN, best, top))
        return predictions
