"""The ticket generations' evaluation gate: accuracy and macro-F1 on a labelled set.

The set is a JSONL file of tickets, `{"subject": ..., "body": ..., "label": "refund_request"}`,
that are not the taxonomy's own examples. A prediction of `unknown` counts as wrong. Macro-F1
averages the F1 of every intent the set or the predictions name, so a taxonomy that folds
one intent into another is penalised even where accuracy hides it.
"""

import json
from dataclasses import dataclass
from pathlib import Path


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
    return {
        "accuracy": round(accuracy, 4),
        "macro_f1": round(sum(scored) / len(scored), 4),
        "tickets": len(labels),
    }
