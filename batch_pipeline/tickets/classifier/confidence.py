"""Honest confidences: temperature scaling of a head's scores, and the expected calibration
error that says how far a confidence is from how often it is right.

A head's scores are turned into logits (a logistic head's log-probabilities; a prototype
head's cosines as they are) and divided by one temperature before the softmax. The
temperature is the one that minimises the negative log-likelihood of the held-out texts'
true intents (Guo et al., 2017, "On Calibration of Modern Neural Networks"): it never changes
which intent is on top, only how sure the answer says it is. It is fitted on the same
held-out folds that choose the head and the `unknown` threshold, in-scope texts only (an
out-of-scope text has no true intent to be sure of). Held-out texts labelled `unknown` count
too, their target every intent alike (the uniform distribution, as outlier exposure trains a
model on outliers: Hendrycks et al., 2019): without them, a head that never confuses two
intents held out is fitted to a temperature near zero, and its confidences would then claim
certainty for the out-of-scope tickets too.

The expected calibration error is the gap between confidence and accuracy, averaged over 15
equal-width confidence bins weighted by how many answers fall in each (Guo et al.'s ECE).
"""

import numpy as np

BINS = 15  # Guo et al.'s
# log-temperatures searched: 0.001 to 100, beyond what a head's scores need (a prototype
# head's cosines differ by hundredths: their temperature is small)
LOG_RANGE = (float(np.log(0.001)), float(np.log(100.0)))
SEARCH_STEPS = 60  # golden-section steps: the temperature to about 1e-6 relative


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def logits_of(kind: str, scores: np.ndarray) -> np.ndarray:
    """A head's scores as logits: a logistic head's probabilities as their logarithms (the
    softmax of which gives them back), a prototype head's cosines as they are."""
    if kind == "logistic":
        return np.log(np.clip(np.asarray(scores, dtype=np.float64), 1e-30, None))
    return np.asarray(scores, dtype=np.float64)


def calibrated(kind: str, scores: np.ndarray, temperature: float) -> np.ndarray:
    """A head's scores as calibrated probabilities: softmax(its logits / `temperature`)."""
    return softmax(logits_of(kind, scores) / temperature)


def negative_log_likelihood(
    logits: np.ndarray, labels: np.ndarray, temperature: float, outside: np.ndarray | None = None
) -> float:
    """The mean negative log-likelihood of `labels` under softmax(logits / T), and of the
    uniform distribution for each row of `outside` (texts that fit no intent)."""
    total, count = 0.0, 0
    for rows, uniform in ((logits, False), (outside, True)):
        if rows is None or not len(rows):
            continue
        scaled = rows / temperature
        scaled = scaled - scaled.max(axis=1, keepdims=True)
        log_norm = np.log(np.exp(scaled).sum(axis=1))
        target = scaled.mean(axis=1) if uniform else scaled[np.arange(len(rows)), labels]
        total += float(np.sum(log_norm - target))
        count += len(rows)
    return total / max(count, 1)


def fit_temperature(
    logits: np.ndarray, labels: np.ndarray, outside: np.ndarray | None = None
) -> float:
    """The temperature that minimises the held-out negative log-likelihood of `labels`
    (intent numbers) under softmax(logits / T), and of the uniform distribution for the rows
    of `outside`: a golden-section search over log T. 1.0 where there is nothing to fit on."""
    if not len(labels) and (outside is None or not len(outside)):
        return 1.0
    low, high = LOG_RANGE
    ratio = (np.sqrt(5.0) - 1) / 2

    def loss(log_t: float) -> float:
        return negative_log_likelihood(logits, labels, float(np.exp(log_t)), outside)

    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = loss(a), loss(b)
    for _ in range(SEARCH_STEPS):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = loss(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = loss(b)
    return float(np.exp((low + high) / 2))


def expected_calibration_error(
    confidences: np.ndarray, correct: np.ndarray, bins: int = BINS
) -> float | None:
    """Σ over equal-width confidence bins of (share of answers in the bin) × |accuracy −
    mean confidence| there; None without answers. A confidence outside [0, 1] (a cosine)
    is clipped into it: it is then scored as the probability it would be read as."""
    confidences = np.clip(np.asarray(confidences, dtype=np.float64), 0.0, 1.0)
    correct = np.asarray(correct, dtype=np.float64)
    if not len(confidences):
        return None
    at = np.minimum((confidences * bins).astype(int), bins - 1)
    error = 0.0
    for k in range(bins):
        mine = at == k
        if mine.any():
            error += mine.mean() * abs(correct[mine].mean() - confidences[mine].mean())
    return float(error)
