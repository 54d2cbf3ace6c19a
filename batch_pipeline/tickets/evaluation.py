"""The ticket generations' evaluation gate: accuracy and macro-F1 on a labelled set.

The set is a JSONL file of tickets, `{"subject": ..., "body": ..., "label": "refund_request"}`,
that are not the taxonomy's own examples. A prediction of `unknown` counts as wrong in the
accuracy; `coverage` (the share answered) and `answered_accuracy` say how `unknown` spends
it. Macro-F1 averages the F1 of every intent the set or the predictions name, so a taxonomy
that folds one intent into another is penalised even where accuracy hides it.
"""

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from batch_pipeline.config.taxonomy import UNKNOWN


@dataclass(frozen=True)
class LabelledTicket:
    subject: str
    body: str
    label: str


class TicketEvalSetError(ValueError):
    """A labelled set that cannot be used; the message names the line."""


def load_labelled_tickets(path: Path, intents: list[str]) -> list[LabelledTicket]:
    known = set(intents)
    tickets = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            ticket = LabelledTicket(
                str(item.get("subject") or ""), str(item["body"]), str(item["label"])
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise TicketEvalSetError(
                f"{path}:{number}: expected body and label ({error})"
            ) from None
        if ticket.label not in known:
            raise TicketEvalSetError(
                f"{path}:{number}: label {ticket.label!r} is not an intent of the taxonomy"
            )
        tickets.append(ticket)
    if not tickets:
        raise TicketEvalSetError(f"{path}: no labelled tickets")
    return tickets


def classification_scores(labels: list[str], predicted: list[str]) -> dict[str, float]:
    """Accuracy and macro-F1 of `predicted` against `labels`, and how many were scored."""
    if len(labels) != len(predicted) or not labels:
        raise ValueError("one prediction per label, and at least one")
    classes = sorted(set(labels) | set(predicted))
    f1s = []
    for name in classes:
        tp = sum(1 for t, p in zip(labels, predicted, strict=True) if t == p == name)
        fp = sum(1 for t, p in zip(labels, predicted, strict=True) if p == name and t != name)
        fn = sum(1 for t, p in zip(labels, predicted, strict=True) if t == name and p != name)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    # unknown is a prediction, not a class the set labels: it lowers recall, not the average
    scored = [f for name, f in zip(classes, f1s, strict=True) if name in set(labels)]
    accuracy = sum(t == p for t, p in zip(labels, predicted, strict=True)) / len(labels)
    answered = [(t, p) for t, p in zip(labels, predicted, strict=True) if p != UNKNOWN]
    return {
        "accuracy": round(accuracy, 4),
        "macro_f1": round(sum(scored) / len(scored), 4),
        "coverage": round(len(answered) / len(labels), 4),  # the share answered
        "answered_accuracy": (
            round(sum(t == p for t, p in answered) / len(answered), 4) if answered else 0.0
        ),
        "tickets": len(labels),
    }


WORST_PAIRS = 5  # confusions listed: the most frequent (true intent, predicted) pairs


def intent_figures(labels: list[str], predicted: list[str]) -> dict[str, object]:
    """Precision, recall and support of every intent the set labels, and the most frequent
    confusions (`refund_request → duplicate_charge 14`; `unknown` among them)."""
    pairs = list(zip(labels, predicted, strict=True))
    per_intent = {}
    for name in sorted(set(labels)):
        support = sum(1 for t, _ in pairs if t == name)
        chosen = sum(1 for _, p in pairs if p == name)
        hits = sum(1 for t, p in pairs if t == p == name)
        per_intent[name] = {
            "precision": round(hits / chosen, 4) if chosen else 0.0,
            "recall": round(hits / support, 4),
            "support": support,
        }
    wrong = Counter((t, p) for t, p in pairs if t != p)
    confusions = [f"{t} → {p} {n}" for (t, p), n in wrong.most_common(WORST_PAIRS)]
    return {"per_intent": per_intent, "confusions": confusions}
