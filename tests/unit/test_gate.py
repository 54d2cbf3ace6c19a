"""The generation gate (`generations.evaluation.gate`) compares measured scores with live's;
a configured target among the scores is a floor for the score it targets, never compared with
live's, and what is lower the better (a cascade's share escalated, its cost) is reported."""

from batch_pipeline.generations.evaluation import gate

LIVE = {
    "accuracy": 0.9,
    "cascade_accuracy": 0.85,
    "cascade_target": 0.9,
    "cascade_escalated_share": 0.4,
    "cascade_cost_per_1k": 5.0,
}


def test_a_target_lowered_on_purpose_is_no_reason_to_refuse():
    """Round six, defect 3: target 0.9 -> 0.8 with the measured accuracy unchanged was
    refused as `cascade_target 0.8000 < live 0.9000 - 0.02`."""
    candidate = {**LIVE, "cascade_target": 0.8}
    verdict = gate(True, candidate, LIVE, tolerance=0.02)
    assert verdict.allowed, verdict.reason
    assert "no worse than live" in verdict.reason


def test_a_target_is_a_floor_for_its_measured_score():
    candidate = {**LIVE, "cascade_target": 0.95}
    verdict = gate(True, candidate, LIVE, tolerance=0.02)
    assert not verdict.allowed
    assert verdict.reason == "below its floor: cascade_accuracy 0.8500 < cascade_target 0.9500"
    first = gate(True, candidate, None, tolerance=0.02)  # with nothing live too
    assert not first.allowed and "cascade_target" in first.reason


def test_escalating_less_or_paying_less_is_not_worse():
    candidate = {
        **LIVE,
        "cascade_target": 0.8,
        "cascade_escalated_share": 0.1,
        "cascade_cost_per_1k": 1.0,
    }
    assert gate(True, candidate, LIVE, tolerance=0.02).allowed


def test_a_measured_score_worse_than_live_is_still_refused():
    candidate = {**LIVE, "cascade_accuracy": 0.80, "cascade_target": 0.8}
    verdict = gate(True, candidate, LIVE, tolerance=0.02)
    assert not verdict.allowed
    assert verdict.reason == "worse than live: cascade_accuracy 0.8000 < live 0.8500 - 0.02"
