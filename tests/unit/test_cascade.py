"""The cascade's threshold (`tickets/cascade/threshold.py`): an exact one-sided binomial bound, a
union bound over the thresholds tried, the fewest tickets escalated that meet the target, and
nothing escalated where the chat model would not help or no threshold is safe. The guarantee
itself is checked by simulation: drawn again and again, the chosen cascade's true accuracy falls
under the target at most delta of the time."""

import numpy as np
import pytest

from batch_pipeline.tickets.cascade.threshold import accuracy_lower_bound, choose_threshold


def test_the_lower_bound_is_clopper_pearson_s():
    # beta.ppf(alpha, k, n - k + 1), from scipy, for these
    assert accuracy_lower_bound(90, 100, 0.05) == pytest.approx(0.8362823767, abs=1e-9)
    assert accuracy_lower_bound(480, 500, 0.01) == pytest.approx(0.9346620036, abs=1e-9)
    assert accuracy_lower_bound(1000, 1000, 0.05) == pytest.approx(0.05 ** (1 / 1000), abs=1e-9)
    assert accuracy_lower_bound(0, 10, 0.05) == 0.0


def population(rng: np.random.Generator, n: int):  # noqa: ANN201
    """Tickets whose classifier is right as often as its (calibrated) confidence says, and a
    chat model right 90% of the time whatever the confidence."""
    confidence = rng.beta(5, 1.2, size=n)
    head = rng.random(n) < confidence
    chat = rng.random(n) < 0.9
    return confidence, head, chat


def test_the_fewest_tickets_escalate_that_meet_the_target_with_the_stated_confidence():
    rng = np.random.default_rng(3)
    confidence, head, chat = population(rng, 2000)
    plan = choose_threshold(confidence, head, chat, target_accuracy=0.85, delta=0.1)
    assert plan.threshold is not None and 0 < plan.escalated_share < 0.5
    assert plan.head_accuracy < 0.85 <= plan.lower_bound <= plan.right / plan.labels
    escalated = confidence < plan.threshold
    assert escalated.mean() == pytest.approx(plan.escalated_share)
    cascade = np.where(escalated, chat, head)
    assert cascade.sum() == plan.right
    # one ticket fewer escalated would not have met the bound
    lower = np.sort(confidence)[int(escalated.sum()) - 1]
    fewer = np.where(confidence < lower, chat, head).sum()
    assert accuracy_lower_bound(int(fewer), 2000, 0.1 / plan.candidates) < 0.85


def test_the_guarantee_holds_on_tickets_drawn_as_the_sample_was():
    rng = np.random.default_rng(11)
    failures, chosen, trials, delta, target = 0, 0, 200, 0.1, 0.85
    for _ in range(trials):
        plan = choose_threshold(*population(rng, 300), target_accuracy=target, delta=delta)
        if plan.threshold is None:
            continue
        chosen += 1
        confidence, head, chat = population(rng, 20_000)  # the true accuracy, near enough
        true = np.where(confidence < plan.threshold, chat, head).mean()
        failures += true < target
    assert chosen > trials / 2 and failures / trials <= delta, (chosen, failures)


def test_nothing_escalates_where_the_chat_model_is_no_better_or_no_threshold_is_safe():
    rng = np.random.default_rng(5)
    confidence, head, _ = population(rng, 1000)
    worse = rng.random(1000) < 0.3  # a chat model right 30% of the time
    plan = choose_threshold(confidence, head, worse, target_accuracy=0.85, delta=0.1)
    assert plan.threshold is None and plan.escalated_share == 0.0
    assert "nothing escalates" in plan.note
    good = choose_threshold(confidence, head, np.ones(1000, bool), 0.85, 0.1, label_budget=20)
    assert good.labels == 20 and good.threshold is None  # 20 labels cannot back 85%
    alone = choose_threshold(confidence, np.ones(1000, bool), head, 0.85, 0.1)
    assert alone.threshold is None and alone.note.startswith("the classifier alone meets")
    with pytest.raises(ValueError, match="delta"):
        choose_threshold(confidence, head, head, 0.85, 0.0)
