"""The cascade's threshold, with a stated guarantee: which tickets the classifier answers and
which it sends to a chat model, chosen so that the combined accuracy meets a target with
probability at least 1 - delta.

On a sample of labelled held-out tickets (at most `label_budget` of them) each ticket has the
classifier's calibrated confidence, whether the classifier is right, and whether the chat
model is right. For a threshold t, the tickets under t go to the chat model; the cascade is
right on a ticket where the model that answers it is. Every candidate threshold (the
distinct confidences of the sample, and "escalate nothing") gives a count of right answers k
out of n, and its accuracy's one-sided Clopper-Pearson lower bound at level delta / M, M the
number of candidates tried: by the union bound (Bonferroni), the chance that any of the M
bounds is wrong is at most delta, so the threshold chosen meets the target on tickets drawn
as the sample was with probability at least 1 - delta. This is the guarantee LOTUS's
approximate cascades state (Patel et al., 2024, "Semantic Operators"; a union bound over the
thresholds tried), here with an exact binomial bound rather than a normal approximation.

Of the thresholds whose bound meets the target, the lowest is chosen: the fewest tickets go to
the (dearer) chat model. Where the chat model is no more often right than the classifier on
the tickets a threshold would send it, that threshold is not taken; where no threshold meets
the target, nothing escalates and the plan says why.
"""

import math
from dataclasses import dataclass

import numpy as np

BISECTION_STEPS = 60


def binomial_upper_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (exact for any n here)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    j = np.arange(k, n + 1)
    terms = (
        log_factorial[n]
        - log_factorial[j]
        - log_factorial[n - j]
        + j * math.log(p)
        + (n - j) * math.log1p(-p)
    )
    top = float(terms.max())
    return min(1.0, math.exp(top) * float(np.exp(terms - top).sum()))


def accuracy_lower_bound(k: int, n: int, alpha: float) -> float:
    """The one-sided Clopper-Pearson lower bound of a proportion at level `alpha`: the p at
    which k or more successes of n have probability `alpha` (0 for k = 0)."""
    if n <= 0 or k <= 0:
        return 0.0
    low, high = 0.0, k / n
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if binomial_upper_tail(k, n, middle) < alpha:
            low = middle
        else:
            high = middle
    return low


def right_answers_needed(n: int, alpha: float, target: float) -> int | None:
    """The fewest right answers of n whose accuracy's lower bound at `alpha` meets `target`
    (the bound grows with them); None where n right answers do not."""
    if accuracy_lower_bound(n, n, alpha) < target:
        return None
    low, high = 0, n  # the bound fails at low (or low is 0) and holds at high
    while high - low > 1:
        middle = (low + high) // 2
        if accuracy_lower_bound(middle, n, alpha) >= target:
            high = middle
        else:
            low = middle
    return high


@dataclass(frozen=True)
class CascadePlan:
    """The threshold chosen and its arithmetic, for the review and the docs."""

    threshold: float | None  # escalate tickets whose confidence is under it; None: none
    target_accuracy: float
    delta: float
    labels: int  # held-out tickets the choice was made on
    candidates: int  # thresholds tried (M of the union bound)
    right: int  # of `labels`, right under the cascade at the threshold
    lower_bound: float  # the accuracy's lower bound at delta / candidates
    escalated_share: float  # of `labels`, sent to the chat model
    head_accuracy: float  # the classifier's alone, on the same tickets
    note: str

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def choose_threshold(
    confidences: np.ndarray,
    head_right: np.ndarray,
    chat_right: np.ndarray,
    target_accuracy: float,
    delta: float,
    label_budget: int | None = None,
) -> CascadePlan:
    """The lowest escalation threshold whose cascade accuracy, on the labelled held-out
    tickets (the first `label_budget` of them), meets `target_accuracy` with probability at
    least 1 - `delta` (see the module docstring)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be between 0 and 1, not {delta}")
    if not 0 < target_accuracy <= 1:
        raise ValueError(f"target_accuracy must be in (0, 1], not {target_accuracy}")
    confidences = np.asarray(confidences, dtype=np.float64)[:label_budget]
    head_right = np.asarray(head_right, dtype=bool)[:label_budget]
    chat_right = np.asarray(chat_right, dtype=bool)[:label_budget]
    n = len(confidences)
    head_accuracy = float(head_right.mean()) if n else 0.0
    if not n:
        return CascadePlan(
            None,
            target_accuracy,
            delta,
            0,
            0,
            0,
            0.0,
            0.0,
            0.0,
            "no labelled held-out tickets: nothing escalates",
        )
    order = np.argsort(confidences, kind="stable")  # least sure first
    sorted_conf = confidences[order]
    # escalating the i least sure tickets: the head answers the rest, the chat model those
    gain = np.concatenate([[0], np.cumsum(chat_right[order].astype(int) - head_right[order])])
    cuts = [0] + [i for i in range(1, n + 1) if i == n or sorted_conf[i] > sorted_conf[i - 1]]
    alpha = delta / len(cuts)
    base = int(head_right.sum())
    needed = right_answers_needed(n, alpha, target_accuracy)
    best = None
    for i in cuts:  # lowest threshold first: the fewest escalated
        if i and gain[i] <= 0:
            continue  # the chat model is no better than the head on these: not worth sending
        right = base + int(gain[i])
        if needed is not None and right >= needed:
            best = (i, right, accuracy_lower_bound(right, n, alpha))
            break
    if best is None:
        right = base + int(max(gain[i] for i in cuts))
        return CascadePlan(
            None,
            target_accuracy,
            delta,
            n,
            len(cuts),
            base,
            accuracy_lower_bound(base, n, alpha),
            0.0,
            head_accuracy,
            f"no threshold makes the cascade {target_accuracy:.1%} accurate with probability "
            f"{1 - delta:.0%} on {n} held-out labelled texts (at best {right} right): nothing "
            "escalates; label more tickets, lower the target, or use a better chat model",
        )
    i, right, bound = best
    threshold = None if i == 0 else (float(sorted_conf[i]) if i < n else math.inf)
    note = (
        "the classifier alone meets the target: nothing escalates"
        if i == 0
        else f"{i} of {n} held-out labelled texts escalate; the cascade is right on {right}"
    )
    return CascadePlan(
        threshold, target_accuracy, delta, n, len(cuts), right, bound, i / n, head_accuracy, note
    )
