"""Training a ticket generation's classifier: candidates scored held out, the better kept, an
`unknown` threshold calibrated for a target precision, out-of-scope labels that teach it, and
labels that contradict the taxonomy refused. Synthetic vectors: intents are clusters."""

import numpy as np
import pytest

from batch_pipeline.config.taxonomy import UNKNOWN
from batch_pipeline.tickets.classifier.heads import LOGISTIC, PROTOTYPE
from batch_pipeline.tickets.classifier.training import (
    OUT_OF_SCOPE,
    LabelsRefusedError,
    Thresholds,
    TrainingPool,
    calibrate,
    folds_of,
    train_classifier,
)

DIM, INTENTS = 32, 6


def clusters(seed: int, per_intent: int, spread: float = 0.6):  # noqa: ANN201
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(INTENTS, DIM))
    labels = np.repeat(np.arange(INTENTS), per_intent)
    vectors = centres[labels] + spread * rng.normal(size=(len(labels), DIM))
    return centres, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), labels


def pool_of(descriptions, vectors, labels, history: int = 0) -> TrainingPool:  # noqa: ANN001
    names = [f"intent_{n}" for n in range(INTENTS)]
    texts = [f"text {n}" for n in range(len(labels))]
    return TrainingPool(names, descriptions, vectors, np.asarray(labels), texts, history)


def test_auto_keeps_the_head_that_scores_better_held_out_and_records_both():
    centres, vectors, labels = clusters(1, 30, spread=2.0)
    # descriptions that point between intents: the prototype weighs them as much as all
    # examples together, the logistic head as one example among many
    misleading = centres + np.roll(centres, 1, axis=0) * 3
    classifier, report = train_classifier(pool_of(misleading, vectors, labels))
    assert set(report.candidates) == {PROTOTYPE, LOGISTIC}
    assert report.candidates[LOGISTIC] > report.candidates[PROTOTYPE]
    assert report.classifier == LOGISTIC == classifier.head.kind
    assert report.validation == len(labels)  # k-fold: every labelled text scored held out
    truth = np.repeat(np.arange(INTENTS), 20)  # a fresh draw around the same centres
    rng = np.random.default_rng(3)
    test = centres[truth] + 2.0 * rng.normal(size=(len(truth), DIM))
    prototype, _ = train_classifier(pool_of(misleading, vectors, labels), classifier=PROTOTYPE)

    def accuracy(chosen) -> float:  # noqa: ANN001 - on fresh data, as held out predicted
        predicted = [p.top[0][0] for p in chosen.classify(test)]
        return np.mean([p == f"intent_{t}" for p, t in zip(predicted, truth, strict=True)])

    assert accuracy(classifier) > accuracy(prototype) + 0.1


def test_a_tie_keeps_the_prototype_and_an_explicit_classifier_trains_only_that():
    centres, vectors, labels = clusters(4, 10, spread=0.05)  # trivially separable
    _, report = train_classifier(pool_of(centres, vectors, labels))
    assert report.candidates[PROTOTYPE] == report.candidates[LOGISTIC] == 1.0
    assert report.classifier == PROTOTYPE
    _, only = train_classifier(pool_of(centres, vectors, labels), classifier=LOGISTIC)
    assert list(only.candidates) == [LOGISTIC] and only.classifier == LOGISTIC
    with pytest.raises(ValueError, match="unknown classifier 'svm'"):
        train_classifier(pool_of(centres, vectors, labels), classifier="svm")


def test_the_folds_are_dealt_by_text_and_an_intent_s_only_text_always_trains():
    labels = np.array([0, 0, 0, 0, 0, 1, OUT_OF_SCOPE])
    texts = ["a", "b", "c", "d", "e", "f", "g"]
    fold = folds_of(labels, texts, 5)
    assert sorted(fold[:5]) == [0, 1, 2, 3, 4] and fold[5] == -1 and fold[6] == 0
    assert (folds_of(labels, texts, 5) == fold).all()  # the same on every call and machine


def test_the_threshold_is_the_lowest_whose_answers_meet_the_target_with_confidence():
    # 400 sure answers, all right; then 200 less sure, one in four wrong
    confidences = np.linspace(0.99, 0.01, 600)
    correct = np.ones(600, bool)
    correct[400::4] = False
    threshold, note = calibrate(confidences, correct, 0.95)
    answered = confidences >= threshold
    assert note is None and 400 <= answered.sum() < 600
    assert correct[answered].mean() > 0.95
    plain = np.cumsum(correct) / np.arange(1, 601)  # the plain share would answer more
    assert np.flatnonzero(plain >= 0.95)[-1] + 1 > answered.sum()
    # a handful of lucky answers does not claim 95%: the plain share sets it, and says so
    few, said = calibrate(np.array([0.9, 0.8, 0.7, 0.6]), np.array([1, 1, 1, 0], bool), 0.95)
    assert few == 0.7 and "too few held-out answers" in said
    # no threshold reaches the target: unknown is not used, rather than swallowing everything
    weak, said = calibrate(np.array([0.9, 0.8]), np.array([False, True]), 0.95)
    assert weak == -1.0 and "unknown is not used" in said
    # everything already meets it, with evidence: nothing is turned unknown
    assert calibrate(confidences, np.ones(600, bool), 0.95) == (-1.0, None)


def test_tickets_labelled_unknown_teach_the_threshold_to_catch_out_of_scope():
    centres, vectors, labels = clusters(5, 40, spread=0.9)
    rng = np.random.default_rng(6)
    outside = rng.normal(size=(120, DIM))  # no intent's direction
    outside /= np.linalg.norm(outside, axis=1, keepdims=True)
    taught = np.vstack([vectors, outside[:60]])
    with_unknown = np.concatenate([labels, np.full(60, OUT_OF_SCOPE)])
    classifier, report = train_classifier(
        pool_of(centres, taught, with_unknown, history=len(with_unknown)),
        target_precision=0.95,
    )
    plain, untaught = train_classifier(pool_of(centres, vectors, labels, history=len(labels)))
    caught = np.mean([p.intent == UNKNOWN for p in classifier.classify(outside[60:])])
    missed = np.mean([p.intent == UNKNOWN for p in plain.classify(outside[60:])])
    assert report.min_confidence > untaught.min_confidence
    assert caught >= 0.7 and caught > missed + 0.2, (caught, missed)
    assert report.answered_accuracy >= 0.95 and report.coverage < 1.0


def test_fixed_thresholds_win_and_the_report_counts_the_right_answers_they_discard():
    centres, vectors, labels = clusters(7, 20, spread=0.9)
    classifier, report = train_classifier(
        pool_of(centres, vectors, labels), thresholds=Thresholds(0.99, 0.5)
    )
    assert not report.calibrated and classifier.min_confidence == 0.99
    assert classifier.min_margin == 0.5 and report.discarded_correct > 0


def test_labels_that_contradict_the_taxonomy_are_refused():
    centres, vectors, labels = clusters(8, 30)
    taxonomy = np.arange(0, len(labels), 10)  # a few examples per intent, rightly labelled
    history = np.setdiff1d(np.arange(len(labels)), taxonomy)
    shuffled = np.random.default_rng(9).permutation(labels[history])
    order = np.concatenate([taxonomy, history])
    pool = pool_of(
        centres,
        vectors[order],
        np.concatenate([labels[taxonomy], shuffled]),
        history=len(history),
    )
    with pytest.raises(LabelsRefusedError, match=r"agree with the taxonomy on only .*shuffled"):
        train_classifier(pool)
    honest = pool_of(centres, vectors[order], labels[order], history=len(history))
    assert train_classifier(honest)[1].label_agreement > 0.9


def test_the_review_scores_say_what_unknown_costs_and_which_intents_are_confused():
    from batch_pipeline.tickets.evaluation import classification_scores, intent_figures
    from batch_pipeline.tickets.report import evaluation_line

    labels = ["refund", "refund", "refund", "charge", "charge", "reset"]
    predicted = ["refund", "charge", UNKNOWN, "charge", "charge", "reset"]
    scores = {**classification_scores(labels, predicted), **intent_figures(labels, predicted)}
    assert scores["accuracy"] == pytest.approx(4 / 6, abs=1e-4)
    assert scores["coverage"] == pytest.approx(5 / 6, abs=1e-4)
    assert scores["answered_accuracy"] == pytest.approx(4 / 5, abs=1e-4)
    assert scores["per_intent"]["refund"] == {"precision": 1.0, "recall": 0.3333, "support": 3}
    assert scores["per_intent"]["charge"]["precision"] == pytest.approx(2 / 3, abs=1e-4)
    assert scores["confusions"] == ["refund → charge 1", f"refund → {UNKNOWN} 1"]
    line = evaluation_line(scores)
    assert "83.3% answered, 80.0% of those right" in line
    assert "weakest: refund recall 0.33" in line and "confused: refund → charge 1" in line


def test_with_out_of_scope_held_out_the_threshold_is_where_accuracy_peaks():
    from batch_pipeline.tickets.classifier.training import best_accuracy_threshold

    confidences = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    correct = np.array([True, True, False, True, False, False])
    outside = np.array([False, False, True, False, True, True])  # out of scope: never right
    # answering the 4 surest scores 3 right + 2 out of scope kept unknown: the peak
    assert best_accuracy_threshold(confidences, correct, outside) == 0.6
    assert best_accuracy_threshold(confidences, correct, np.zeros(6, bool)) == -1.0


def test_after_fine_tuning_only_the_fold_the_encoder_never_saw_validates():
    """A fine-tuned encoder learned from every fold but `ENCODER_HELD_OUT`: validating the
    head on the others would score texts whose vectors were fitted to their intent (held out
    0.994, test 0.924 on CLINC150). That fold alone validates, calibrates and thresholds."""
    from batch_pipeline.tickets.classifier.training import ENCODER_HELD_OUT, encoder_texts

    centres, vectors, labels = clusters(5, 10, spread=4.0)
    pool = pool_of(centres, vectors, labels)
    learns = encoder_texts(labels, pool.texts, 0.2)
    assert learns.sum() == 48 and not learns[folds_of(labels, pool.texts, 5) == 0].any()
    _, everything = train_classifier(pool)
    _, unseen = train_classifier(pool, held_out_fold=ENCODER_HELD_OUT)
    assert everything.validation == 60 and unseen.validation == 12 == (~learns).sum()
    # a pool whose learned folds are "memorised" (each text at its intent's centre) and
    # whose unseen fold is not: only the unseen fold says how the head does
    memorised = np.where(learns[:, None], centres[labels], vectors)
    fitted = pool_of(centres, memorised / np.linalg.norm(memorised, axis=1, keepdims=True), labels)
    _, optimistic = train_classifier(fitted, classifier=LOGISTIC)
    _, honest = train_classifier(fitted, classifier=LOGISTIC, held_out_fold=ENCODER_HELD_OUT)
    assert optimistic.candidates[LOGISTIC] > honest.candidates[LOGISTIC]
