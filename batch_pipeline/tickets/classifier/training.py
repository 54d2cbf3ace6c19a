"""Training a generation's classifier: candidates scored on held-out data, the best kept, and
an `unknown` threshold chosen for a target precision.

The labelled pool is the taxonomy's examples plus the labelled tickets of the configured
training days (`tickets.training`), minus the evaluation set. Validation is k-fold, with
k = 1 / `validation_fraction` (5 by default): each intent's texts are dealt round the folds
by a hash of their text (the same on every machine), and each text is scored by a head
trained on the other folds and the descriptions, so every labelled text is held out once and
a small taxonomy still validates on all of it. Each candidate head (`classifier: auto` tries
them all) is scored so; the best is kept (a tie keeps the simpler, `prototype`) and trained
on the whole pool.

The kept head's scores are calibrated by temperature scaling (`tickets.calibration`), the
temperature fitted on the same held-out answers (`calibration: none` keeps the head's own
scores); the report gives the expected calibration error of those answers before and after.
The calibrated scores are the confidences a ticket's row carries; `unknown` is decided on the
head's own (`heads`' docstring says why).

The `unknown` threshold is the lowest top score at which the kept head's held-out answers are
`target_precision` correct with 95% confidence (a Wilson lower bound, so a few lucky answers
do not set it), so `unknown` costs no more right answers than that target needs. Tickets
labelled `unknown` (out of scope: no intent fits) do not train a head; they are held out like
the rest, where any answer to them is wrong, so they teach the threshold what out of scope
looks like, and with them the threshold is no lower than where held-out accuracy peaks,
`unknown` counting as right for them (Larson et al.'s oos-threshold rule). Without them, the
threshold only guards against confusions between intents. Fixed `min_confidence` and
`min_margin` in the configuration replace it; the report then says how many right held-out
answers they discard.

Where the encoder is fine-tuned on the labelled texts (`tickets.training.fine_tune`), a text
it learned from is no longer held out for the head: its vector was pulled towards its intent.
The encoder then learns from every fold but one (`ENCODER_HELD_OUT`), and that fold alone
validates, calibrates and sets the threshold (`held_out_fold`); the kept head still trains
on everything.
"""

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from batch_pipeline.tickets.classifier.confidence import (
    calibrated,
    expected_calibration_error,
    fit_temperature,
    logits_of,
)
from batch_pipeline.tickets.classifier.heads import (
    HEADS,
    LOGISTIC,
    PROTOTYPE,
    CalibratedHead,
    Head,
    IntentClassifier,
    LogisticHead,
    PrototypeHead,
    normalised,
    prototypes_of,
)

AUTO = "auto"
TEMPERATURE = "temperature"  # calibration: temperature scaling on the held-out answers
NO_CALIBRATION = "none"
CALIBRATIONS = (TEMPERATURE, NO_CALIBRATION)
# The labelled history must agree with the taxonomy alone (its prototypes) on at least this
# share of its tickets: below it, the labels are shuffled, or belong to another taxonomy.
MIN_AGREEMENT = 0.5
OUT_OF_SCOPE = -1  # the label number of a ticket labelled `unknown`
Z = 1.645  # one-sided 95%: the confidence the calibrated precision is claimed with
LOGISTIC_C = 10.0  # inverse regularisation: chosen on CLINC150's validation split


@dataclass(frozen=True)
class Thresholds:
    """Fixed thresholds from the configuration, or None to calibrate."""

    min_confidence: float | None = None
    min_margin: float | None = None

    @property
    def fixed(self) -> bool:
        return self.min_confidence is not None or self.min_margin is not None


@dataclass(frozen=True)
class TrainingPool:
    """Labelled vectors (normalised), their intent numbers and texts, and the descriptions."""

    names: list[str]
    descriptions: np.ndarray  # (intents, dim)
    vectors: np.ndarray  # (n, dim)
    labels: np.ndarray  # (n,) intent numbers; OUT_OF_SCOPE for tickets labelled `unknown`
    texts: Sequence[str]  # (n,): what the split hashes
    labelled_tickets: int = 0  # of the pool, the last ones: from the labelled history


def dropped_labels_text(dropped: dict) -> str:
    """The labels left out of training for being no intent of the taxonomy, in one phrase:
    `12 labelled tickets left out, their label no intent of the taxonomy: billing (9),
    refund (3)`."""
    named = ", ".join(f"{label} ({count})" for label, count in dropped["labels"].items())
    rest = dropped["tickets"] - sum(dropped["labels"].values())  # under labels not named
    return (
        f"{dropped['tickets']} labelled tickets left out, their label no intent of the "
        f"taxonomy: {named}" + (f", and {rest} under other labels" if rest else "")
    )


class LabelsRefusedError(ValueError):
    """The labelled history contradicts the taxonomy: nothing is trained on it."""


def label_agreement(pool: TrainingPool) -> float | None:
    """The share of the history's in-scope tickets whose label the taxonomy alone (its
    descriptions and examples, as prototypes) also gives them; None without history."""
    start = len(pool.labels) - pool.labelled_tickets
    history = np.arange(start, len(pool.labels))
    history = history[pool.labels[history] != OUT_OF_SCOPE]
    if not len(history):
        return None
    head = fit_head(PROTOTYPE, pool, np.arange(start))  # the taxonomy's examples alone
    predicted = head.scores(pool.vectors[history]).argmax(axis=1)
    return float((predicted == pool.labels[history]).mean())


@dataclass
class TrainingReport:
    """What training chose and why: every candidate's validation accuracy, the threshold."""

    classifier: str
    candidates: dict[str, float]  # validation accuracy per candidate
    training: int  # labelled texts it trained on (the pool), descriptions aside
    labelled_tickets: int  # of those, from the labelled history
    validation: int  # texts scored held out (by a head trained without them)
    min_confidence: float
    min_margin: float
    calibrated: bool
    coverage: float | None  # share of validation answered (not unknown)
    answered_accuracy: float | None  # accuracy on the answered share
    discarded_correct: int  # correct validation answers that the threshold turned unknown
    label_agreement: float | None  # of the history's labels with the taxonomy alone
    # temperature scaling: the temperature fitted (None: not calibrated), and the expected
    # calibration error of the held-out in-scope answers with the head's own scores and after
    temperature: float | None = None
    ece_before: float | None = None
    ece_after: float | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # the held-out texts' answers, for the cascade's threshold; not recorded
    held_out: "HeldOutAnswers | None" = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "held_out"}


@dataclass(frozen=True)
class HeldOutAnswers:
    """What the classifier answers on the held-out texts, each scored by a head trained
    without it: the pool's positions, the calibrated confidence of the top intent, and the
    answer (the intent's number, or OUT_OF_SCOPE where it says `unknown`)."""

    positions: np.ndarray
    confidence: np.ndarray
    answers: np.ndarray


ENCODER_HELD_OUT = 0  # the fold a fine-tuned encoder does not learn from


def _hash_rank(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def folds_of(labels: np.ndarray, texts: Sequence[str], folds: int) -> np.ndarray:
    """Each text's validation fold, 0..folds-1: an intent's texts, in the order of a hash of
    their text, are dealt round the folds (the same on every machine). An intent's only text
    gets -1: it always trains. Out-of-scope texts are dealt the same way but never train."""
    fold = np.full(len(labels), -1, dtype=int)
    for intent in np.unique(labels):
        mine = sorted(np.flatnonzero(labels == intent), key=lambda i: _hash_rank(texts[i]))
        if len(mine) > 1 or intent == OUT_OF_SCOPE:
            fold[mine] = np.arange(len(mine)) % folds
    return fold


def fold_count(validation_fraction: float) -> int:
    """k of the k-fold validation: 1 / `validation_fraction`, at least 2."""
    return max(2, round(1 / validation_fraction))


def encoder_texts(
    labels: Sequence[int], texts: Sequence[str], validation_fraction: float
) -> np.ndarray:
    """Which labelled texts a fine-tuned encoder may learn from: all but the fold
    `ENCODER_HELD_OUT`, which then validates the head on vectors the encoder never fitted."""
    fold = folds_of(np.asarray(labels), texts, fold_count(validation_fraction))
    return fold != ENCODER_HELD_OUT


def held_out_scores(
    kind: str, pool: TrainingPool, fold: np.ndarray, folds: int, only: int | None = None
) -> np.ndarray:
    """Every validated text's scores from a head of `kind` trained without its fold (rows of
    texts that always train stay zero); with `only`, the texts of that fold alone."""
    scores = np.zeros((len(pool.labels), len(pool.names)), np.float32)
    trains = pool.labels != OUT_OF_SCOPE
    for k in range(folds) if only is None else (only,):
        held = fold == k
        if held.any():
            head = fit_head(kind, pool, np.flatnonzero(trains & ~held))
            scores[held] = head.scores(pool.vectors[held])
    return scores


def unknown_classifier(kind: str) -> ValueError:
    return ValueError(f"unknown classifier {kind!r}; classifiers: {AUTO}, {', '.join(HEADS)}")


def fit_head(kind: str, pool: TrainingPool, at: np.ndarray) -> Head:
    """A head of `kind` trained on the pool's texts at positions `at`, and the descriptions."""
    vectors, labels = pool.vectors[at], pool.labels[at]
    if kind == PROTOTYPE:
        return PrototypeHead(prototypes_of(pool.descriptions, vectors, labels))
    if kind == LOGISTIC:
        from sklearn.linear_model import LogisticRegression

        intents = len(pool.names)
        x = np.vstack([vectors, normalised(pool.descriptions)])
        y = np.concatenate([labels, np.arange(intents)])
        model = LogisticRegression(C=LOGISTIC_C, max_iter=2000).fit(x, y)
        weights, biases = model.coef_, model.intercept_
        if len(model.classes_) == 2:  # sklearn keeps one row for two classes: the second's
            weights = np.vstack([np.zeros_like(weights), weights])
            biases = np.array([0.0, biases[0]])
        coef = np.zeros((intents, x.shape[1]), np.float32)
        intercept = np.full(intents, -1e4, np.float32)  # an intent it never saw: never chosen
        coef[model.classes_], intercept[model.classes_] = weights, biases
        return LogisticHead(coef, intercept)
    raise unknown_classifier(kind)


def precision_lower_bound(hits: np.ndarray, answered: np.ndarray, z: float = Z) -> np.ndarray:
    """The Wilson score interval's lower end of hits / answered: the precision one can claim
    with 95% confidence (one-sided) from that many held-out answers."""
    p = hits / answered
    spread = z * np.sqrt(p * (1 - p) / answered + z * z / (4 * answered * answered))
    return (p + z * z / (2 * answered) - spread) / (1 + z * z / answered)


def calibrate(
    confidences: np.ndarray, correct: np.ndarray, target_precision: float
) -> tuple[float, str | None]:
    """The lowest threshold whose held-out answers are `target_precision` correct with 95%
    confidence (the Wilson bound, so a few lucky answers do not set it), and a note when it
    fell back: to the plain share when too few answers back the bound, or to answering
    everything when no threshold reaches the target (so `unknown` does not swallow a weak
    classifier's every answer). -1 answers everything."""
    if not len(confidences):
        return -1.0, "nothing held out: unknown is not used"
    order = np.argsort(-confidences, kind="stable")
    hits = np.cumsum(correct[order])
    answered = np.arange(1, len(order) + 1)
    for precision, note in (
        (precision_lower_bound(hits, answered), None),
        (
            hits / answered,
            "too few held-out answers to claim the target precision with 95% confidence: "
            "the threshold is where their plain share meets it",
        ),
    ):
        meets = np.flatnonzero(precision >= target_precision)
        if len(meets):
            last = int(meets[-1])  # answer the most tickets that still meet the target
            return (-1.0 if last == len(order) - 1 else float(confidences[order][last])), note
    return -1.0, (
        f"no threshold makes the held-out answers {target_precision:.0%} right: unknown is "
        "not used (label more tickets, or set min_confidence)"
    )


def best_accuracy_threshold(
    confidences: np.ndarray, correct: np.ndarray, out_of_scope: np.ndarray
) -> float:
    """The threshold at which held-out accuracy peaks, `unknown` counting as right for the
    out-of-scope texts (Larson et al.'s oos-threshold rule); the lowest such, -1 if none is
    better than answering everything."""
    order = np.argsort(-confidences, kind="stable")
    # answering the i surest: their right answers, plus every out-of-scope text not answered
    hits = np.concatenate([[0], np.cumsum(correct[order])])
    kept_outside = out_of_scope.sum() - np.concatenate([[0], np.cumsum(out_of_scope[order])])
    score = hits + kept_outside
    best = int(np.flatnonzero(score == score.max())[-1])  # answer as many as the peak allows
    if best == len(order):
        return -1.0
    if best == 0:
        return float(confidences[order][0]) + 1e-6
    return float(confidences[order][best - 1])


def _answered(
    confidences: np.ndarray,
    correct: np.ndarray,
    threshold: float,
    margins: np.ndarray | None = None,
    min_margin: float = 0.0,
) -> tuple[float, float | None, float | None, int]:
    answered = confidences >= threshold
    if margins is not None:
        answered &= margins >= min_margin
    coverage = float(answered.mean())
    accuracy = float(correct[answered].mean()) if answered.any() else None
    return threshold, coverage, accuracy, int((correct & ~answered).sum())


def _top_two(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(-scores, axis=1, kind="stable")
    rows = np.arange(len(scores))
    best = scores[rows, order[:, 0]]
    second = scores[rows, order[:, 1]] if scores.shape[1] > 1 else np.zeros(len(scores))
    return order[:, 0], best, best - second


def train_classifier(
    pool: TrainingPool,
    classifier: str = AUTO,
    validation_fraction: float = 0.2,
    target_precision: float = 0.95,
    thresholds: Thresholds = Thresholds(),
    calibration: str = TEMPERATURE,
    held_out_fold: int | None = None,
) -> tuple[IntentClassifier, TrainingReport]:
    """Choose, calibrate and train a classifier on the pool (see the module docstring);
    with `held_out_fold`, only that fold validates (the rest trained the encoder)."""
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r}; calibrations: {CALIBRATIONS}")
    started = time.perf_counter()
    agreement = label_agreement(pool)
    if agreement is not None and agreement < MIN_AGREEMENT:
        raise LabelsRefusedError(
            f"the labelled tickets agree with the taxonomy on only {agreement:.1%} of them "
            f"(at least {MIN_AGREEMENT:.0%} expected; chance is {1 / len(pool.names):.1%}): "
            "are the labels shuffled, or from another taxonomy? Nothing was trained; fix the "
            "labels or tickets.training"
        )
    candidates = list(HEADS) if classifier == AUTO else [classifier]
    for kind in candidates:
        if kind not in HEADS:  # before any training: fail at once, not after a first fit
            raise unknown_classifier(kind)
    folds = fold_count(validation_fraction)
    fold = folds_of(pool.labels, pool.texts, folds)
    validation = np.flatnonzero(fold >= 0 if held_out_fold is None else fold == held_out_fold)
    notes = []
    scores: dict[str, float] = {}
    held: dict[str, np.ndarray] = {}
    truth = pool.labels[validation]
    in_scope = truth != OUT_OF_SCOPE
    if in_scope.any():
        for kind in candidates:
            scored = held_out_scores(kind, pool, fold, folds, held_out_fold)[validation]
            held[kind] = scored
            hits = scored.argmax(axis=1)[in_scope] == truth[in_scope]
            scores[kind] = round(float(hits.mean()), 4)
        chosen = max(candidates, key=lambda k: (scores[k], k == PROTOTYPE))
    else:
        chosen = candidates[0]
        notes.append("no intent has two labelled texts: nothing to validate or calibrate on")
    fixed = thresholds.fixed
    min_margin = thresholds.min_margin if thresholds.min_margin is not None else 0.0
    threshold, coverage, accuracy, discarded = -1.0, None, None, 0
    temperature = ece_before = ece_after = None
    if chosen in held:
        raw = held[chosen]
        right = raw.argmax(axis=1)[in_scope] == truth[in_scope]
        ece_before = expected_calibration_error(raw.max(axis=1)[in_scope], right)
        if calibration == TEMPERATURE:
            logits = logits_of(chosen, raw)
            temperature = fit_temperature(logits[in_scope], truth[in_scope], logits[~in_scope])
            sure = calibrated(chosen, raw, temperature).max(axis=1)
            ece_after = expected_calibration_error(sure[in_scope], right)
        predicted, best, margins = _top_two(held[chosen])
        correct = predicted == pool.labels[validation]
        if fixed:
            floor = thresholds.min_confidence if thresholds.min_confidence is not None else -1.0
            threshold, coverage, accuracy, discarded = _answered(
                best, correct, floor, margins, min_margin
            )
        else:
            threshold, note = calibrate(best, correct, target_precision)
            notes += [note] if note else []
            outside = pool.labels[validation] == OUT_OF_SCOPE
            if outside.any():  # and no lower than where held-out accuracy peaks
                threshold = max(threshold, best_accuracy_threshold(best, correct, outside))
            threshold, coverage, accuracy, discarded = _answered(best, correct, threshold)
    elif fixed and thresholds.min_confidence is not None:
        threshold = thresholds.min_confidence
    held_out = None
    if chosen in held:  # the scores, answers and margins the threshold was chosen on
        confidence = sure if temperature is not None else raw.max(axis=1)
        clear = (best >= threshold) & (margins >= min_margin)
        held_out = HeldOutAnswers(
            # rounded as a row's confidence is (`IntentClassifier.classify`)
            validation,
            confidence.round(4),
            np.where(clear, predicted, OUT_OF_SCOPE),
        )
    head = fit_head(chosen, pool, np.flatnonzero(pool.labels != OUT_OF_SCOPE))
    if temperature is not None:
        head = CalibratedHead(head, temperature)
    report = TrainingReport(
        classifier=chosen,
        candidates=scores,
        training=len(pool.labels),
        labelled_tickets=pool.labelled_tickets,
        validation=len(validation),
        min_confidence=round(threshold, 6),
        min_margin=min_margin,
        calibrated=not fixed,
        coverage=None if coverage is None else round(coverage, 4),
        answered_accuracy=None if accuracy is None else round(accuracy, 4),
        discarded_correct=discarded,
        label_agreement=None if agreement is None else round(agreement, 4),
        temperature=None if temperature is None else round(temperature, 6),
        ece_before=None if ece_before is None else round(ece_before, 4),
        ece_after=None if ece_after is None else round(ece_after, 4),
        seconds=round(time.perf_counter() - started, 3),
        notes=notes,
        held_out=held_out,
    )
    return IntentClassifier(pool.names, head, threshold, min_margin), report
