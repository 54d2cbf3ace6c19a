"""Honest confidences for the ticket classifier (`tickets/classifier/confidence.py`): the
temperature fitted on held-out answers recovers a known one, the expected calibration error is
Guo et al.'s, and a trained classifier's confidences say how often it is right, on texts it
never saw, without changing a single answer. Synthetic vectors: intents are overlapping
clusters."""

import numpy as np
import pytest

from batch_pipeline.config.taxonomy import UNKNOWN
from batch_pipeline.tickets.classifier.confidence import (
    expected_calibration_error,
    fit_temperature,
    softmax,
)
from batch_pipeline.tickets.classifier.heads import (
    CalibratedHead,
    IntentClassifier,
    head_from_arrays,
)
from batch_pipeline.tickets.classifier.training import train_classifier
from tests.unit.test_training import INTENTS, clusters, pool_of


def test_the_fitted_temperature_is_the_one_the_labels_were_drawn_with():
    rng = np.random.default_rng(11)
    logits = rng.normal(scale=3.0, size=(20_000, 8))
    for true in (0.5, 2.0):
        p = softmax(logits / true)
        labels = np.array([rng.choice(8, p=row) for row in p])
        assert fit_temperature(logits, labels) == pytest.approx(true, rel=0.05)
    assert fit_temperature(logits[:0], np.array([], dtype=int)) == 1.0  # nothing to fit on


def test_the_expected_calibration_error_is_the_weighted_gap_per_confidence_bin():
    # 10 answers at 0.9 of which 6 right (gap 0.3), 10 at 0.55 of which 5 right (gap 0.05)
    confidences = np.array([0.9] * 10 + [0.55] * 10)
    correct = np.array([1] * 6 + [0] * 4 + [1] * 5 + [0] * 5, dtype=bool)
    assert expected_calibration_error(confidences, correct) == pytest.approx(0.175)
    assert expected_calibration_error(np.array([0.8] * 5), np.ones(5, bool)) == pytest.approx(0.2)
    assert expected_calibration_error(np.array([]), np.array([], bool)) is None


@pytest.mark.parametrize("kind", ["prototype", "logistic"])
def test_calibrated_confidences_say_how_often_the_answer_is_right_and_change_no_answer(kind):
    centres, vectors, labels = clusters(3, 60, spread=1.6)
    rng = np.random.default_rng(99)  # fresh texts of the same intents
    fresh_labels = np.repeat(np.arange(INTENTS), 300)
    fresh = centres[fresh_labels] + 1.6 * rng.normal(size=(len(fresh_labels), centres.shape[1]))

    calibrated, report = train_classifier(pool_of(centres, vectors, labels), kind)
    own, plain = train_classifier(pool_of(centres, vectors, labels), kind, calibration="none")
    assert plain.temperature is None and plain.ece_after is None
    assert report.temperature is not None and report.temperature != 1.0
    assert report.ece_after < report.ece_before and report.ece_after < 0.04, report

    ours, theirs = calibrated.classify(fresh), own.classify(fresh)
    assert [p.top[0][0] for p in ours] == [p.top[0][0] for p in theirs]  # no answer changes
    right = np.array(
        [p.top[0][0] == f"intent_{y}" for p, y in zip(ours, fresh_labels, strict=True)]
    )
    after = expected_calibration_error([p.confidence for p in ours], right)
    before = expected_calibration_error([p.confidence for p in theirs], right)
    assert after < before and after < 0.04, (before, after)
    assert [p.raw_confidence for p in ours] == [p.confidence for p in theirs]

    # the head round-trips through the arrays the classifier cache stores
    head = calibrated.head
    assert isinstance(head, CalibratedHead)
    again = IntentClassifier(
        calibrated.names,
        head_from_arrays(head.kind, head.arrays()),
        calibrated.min_confidence,
        calibrated.min_margin,
    )
    assert [p.confidence for p in again.classify(fresh[:50])] == [p.confidence for p in ours[:50]]


def test_calibration_changes_no_decision_unknown_included_only_the_confidences():
    """`unknown` reads the head's own scores: on CLINC150 a threshold on the calibrated ones
    caught fewer out-of-scope texts (`classify`'s docstring)."""
    centres, vectors, labels = clusters(5, 60, spread=1.8)
    rng = np.random.default_rng(7)
    fresh = rng.normal(size=(300, centres.shape[1]))  # out of scope and in between
    fresh[:150] += centres[rng.integers(0, INTENTS, 150)] * 2
    pool = pool_of(centres, vectors, labels)
    calibrated, report = train_classifier(pool, "prototype", target_precision=0.97)
    own, plain = train_classifier(pool, "prototype", target_precision=0.97, calibration="none")
    assert report.min_confidence == plain.min_confidence and report.coverage < 1.0
    ours, theirs = calibrated.classify(fresh), own.classify(fresh)
    assert [p.intent for p in ours] == [p.intent for p in theirs]
    assert 0 < sum(p.intent == UNKNOWN for p in ours) < len(ours)
    assert [p.raw_confidence for p in ours] == [p.confidence for p in theirs]
    assert all(0.0 <= p.confidence <= 1.0 for p in ours)  # probabilities, not cosines
