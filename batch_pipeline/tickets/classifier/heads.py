"""The intent classifier: a head that scores a ticket's vector against every intent, and the
rule that says `unknown`.

Two heads, behind one interface (`Head`), trained by `batch_pipeline.tickets.classifier.training`:

- `PrototypeHead`: cosine similarity to each intent's prototype, its description's vector
  plus the mean of its examples' vectors, normalised. The description weighs as much as all
  examples together, so an intent is what its description says. Needs no labels.
- `LogisticHead`: a multinomial logistic regression on the normalised vectors, trained on the
  examples, the labelled tickets and the descriptions; its scores are probabilities.

Either head's scores are made probabilities that mean what they say by temperature scaling
(`CalibratedHead`, `batch_pipeline.tickets.classifier.confidence`): a ticket's confidence
and its top scores are then how often an answer that sure is right, on the held-out texts.

A ticket whose best score of the head's own is below `min_confidence`, or within `min_margin`
of the second best, is `unknown`. Training chooses `min_confidence` on validation data for a
target precision, unless the configuration fixes both thresholds. The rule reads the head's
own scores, not the calibrated ones: on CLINC150 a threshold on the calibrated scores met the
same precision but caught 6 to 15 points fewer out-of-scope utterances (temperatures under 1
sharpen the scores, ranking by the margin to the second intent, which tells out of scope
apart less well; `docs/ticket-intents.md`).
"""

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from batch_pipeline.config.taxonomy import UNKNOWN, Taxonomy
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.tickets.classifier.confidence import calibrated

TOP_K = 3
PROTOTYPE = "prototype"
LOGISTIC = "logistic"
HEADS = (PROTOTYPE, LOGISTIC)


@dataclass(frozen=True)
class Prediction:
    intent: str  # an intent's name, or `unknown`
    # the best score: a calibrated probability, or the head's own (a cosine, a probability)
    confidence: float
    top: tuple[tuple[str, float], ...]  # the best TOP_K intents with their scores
    # the head's own best score, which `unknown` is decided on; the confidence where the
    # head is not calibrated
    raw_confidence: float | None = None


def normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


class Head(Protocol):
    """Scores vectors against every intent: (len(vectors), intents), higher is likelier."""

    kind: str

    def scores(self, vectors: np.ndarray) -> np.ndarray: ...

    def arrays(self) -> dict[str, np.ndarray]:
        """What the head is, as arrays (to cache it)."""
        ...


class PrototypeHead:
    kind = PROTOTYPE

    def __init__(self, prototypes: np.ndarray) -> None:
        self.prototypes = normalised(np.asarray(prototypes, dtype=np.float32))

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        return vectors @ self.prototypes.T

    def arrays(self) -> dict[str, np.ndarray]:
        return {"prototypes": self.prototypes}


class LogisticHead:
    kind = LOGISTIC

    def __init__(self, coef: np.ndarray, intercept: np.ndarray) -> None:
        self.coef = np.asarray(coef, dtype=np.float32)
        self.intercept = np.asarray(intercept, dtype=np.float32)

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        logits = vectors @ self.coef.T + self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"coef": self.coef, "intercept": self.intercept}


class CalibratedHead:
    """A head whose scores are softmax(its logits / `temperature`): probabilities fitted to
    how often the held-out answers are right (`tickets.calibration`). `raw` gives the head's
    own scores."""

    def __init__(self, inner: Head, temperature: float) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.temperature = float(temperature)

    def raw(self, vectors: np.ndarray) -> np.ndarray:
        return self.inner.scores(vectors)

    def calibrate(self, raw: np.ndarray) -> np.ndarray:
        """The calibrated scores of the head's own `raw` ones."""
        return calibrated(self.kind, raw, self.temperature).astype(np.float32)

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        return self.calibrate(self.raw(vectors))

    def arrays(self) -> dict[str, np.ndarray]:
        return {**self.inner.arrays(), "temperature": np.asarray([self.temperature])}


def head_from_arrays(kind: str, arrays: dict[str, np.ndarray]) -> Head:
    if "temperature" in arrays:
        rest = {k: v for k, v in arrays.items() if k != "temperature"}
        return CalibratedHead(head_from_arrays(kind, rest), float(arrays["temperature"][0]))
    if kind == PROTOTYPE:
        return PrototypeHead(arrays["prototypes"])
    if kind == LOGISTIC:
        return LogisticHead(arrays["coef"], arrays["intercept"])
    raise ValueError(f"unknown classifier head {kind!r}; heads: {', '.join(HEADS)}")


def prototypes_of(descriptions: np.ndarray, vectors: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each intent's description vector plus the mean of its labelled vectors, normalised."""
    out = []
    for at, description in enumerate(normalised(descriptions)):
        mine = vectors[labels == at]
        out.append(description + normalised(mine).mean(axis=0) if len(mine) else description)
    return normalised(np.stack(out))


def embed_prototypes(taxonomy: Taxonomy, embedder: Embedder, prefix: str = "") -> np.ndarray:
    """One normalised prototype per intent from the taxonomy alone (one forward pass)."""
    texts = [prefix + text for i in taxonomy.intents for text in (i.description, *i.examples)]
    vectors = normalised(np.asarray(embedder.embed(texts), dtype=np.float32))
    descriptions, examples, labels, at = [], [], [], 0
    for n, intent in enumerate(taxonomy.intents):
        descriptions.append(vectors[at])
        examples.extend(vectors[at + 1 : at + 1 + len(intent.examples)])
        labels += [n] * len(intent.examples)
        at += 1 + len(intent.examples)
    stacked = np.stack(examples) if examples else np.zeros((0, vectors.shape[1]), np.float32)
    return prototypes_of(np.stack(descriptions), stacked, np.asarray(labels))


class IntentClassifier:
    def __init__(
        self,
        names: list[str],
        head: Head | np.ndarray,
        min_confidence: float,
        min_margin: float,
    ) -> None:
        head = PrototypeHead(head) if isinstance(head, np.ndarray) else head
        rows = head.arrays()["prototypes" if head.kind == PROTOTYPE else "coef"]
        if len(names) != rows.shape[0]:
            raise ValueError("one prototype (or row of weights) per intent")
        self.names = list(names)
        self.head = head
        self.dimension = rows.shape[1]
        self.min_confidence = min_confidence
        self.min_margin = min_margin

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        """Each vector's score for each intent: (len(vectors), intents)."""
        vectors = normalised(np.asarray(vectors, dtype=np.float32).reshape(-1, self.dimension))
        return self.head.scores(vectors)

    def classify(self, vectors: np.ndarray) -> list[Prediction]:
        vectors = normalised(np.asarray(vectors, dtype=np.float32).reshape(-1, self.dimension))
        head = self.head
        is_calibrated = isinstance(head, CalibratedHead)
        raw = head.raw(vectors) if is_calibrated else head.scores(vectors)
        scores = head.calibrate(raw) if is_calibrated else raw  # the head scores once
        predictions = []
        for row, own in zip(scores, raw, strict=True):
            order = np.argsort(-own, kind="stable")[:TOP_K]
            top = tuple((self.names[i], round(float(row[i]), 4)) for i in order)
            best = round(float(own[order[0]]), 4)
            margin = best - round(float(own[order[1]]), 4) if len(order) > 1 else best
            clear = best >= self.min_confidence and margin >= self.min_margin
            intent = self.names[order[0]] if clear else UNKNOWN
            predictions.append(Prediction(intent, top[0][1], top, best if is_calibrated else None))
        return predictions
