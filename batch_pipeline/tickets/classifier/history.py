"""Labelled history: the tickets of the training days that an agent labelled, read from the
export (the source of truth), minus the evaluation set.

A ticket's `label` is the intent an agent assigned when resolving it; `unknown` marks one
that no intent fits (out of scope). Rows without a body or a label are not training data; a
label that is not an intent of the taxonomy is left out, and counted by name, so the
generation's record and `generations list` say which labels were dropped and how often. The
history's hash (of every kept ticket's text and label, in a stable order) is part of the
generation's fingerprint, so a changed history is a new generation. A training day whose
export is missing (purged by retention, or not there yet) does not stop classification: the
history is the days that are there, the missing ones are listed (`missing_days`, on the
generation's record as `history_days_missing`), and since the kept tickets changed, so does
the fingerprint: a new generation, trained without that day, gated before it replaces live.

Reading the window is not free (the export sensor asks for the fingerprint every tick), so a
file or object export's history is cached in staging under a key of each day's file time
and what it is filtered by; a table's days have no file time (an agent's label can change
in place), so a table export is read every time.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import date

from batch_pipeline.config.taxonomy import UNKNOWN, Taxonomy
from batch_pipeline.inference.models import ResolvedModel, load_tokenizer
from batch_pipeline.state.staging import StagePath
from batch_pipeline.tickets.classifier.training import OUT_OF_SCOPE
from batch_pipeline.tickets.exports import ExportMissingError, TicketExport
from batch_pipeline.tickets.prepare import ticket_input


@dataclass(frozen=True)
class LabelledHistory:
    days: list[str]
    tickets: list[tuple[str, str, str]] = field(default_factory=list)  # subject, body, label
    # labels that are no intent of the taxonomy, with how many tickets carry each: left out
    dropped_labels: dict[str, int] = field(default_factory=dict)
    held_out: int = 0  # tickets of the evaluation set: left out
    # training days whose export is gone (a retention policy purged it) or not there yet:
    # the history is the days that are, and its hash (so the fingerprint) says which
    missing_days: list[str] = field(default_factory=list)

    @property
    def unknown_labels(self) -> int:
        """Tickets left out for a label that is no intent of the taxonomy."""
        return sum(self.dropped_labels.values())

    def dropped_summary(self, most: int = 10) -> dict[str, object] | None:
        """The labels left out, for the generation's record: their count and the `most`
        frequent by name; None when every label is an intent."""
        if not self.dropped_labels:
            return None
        common = sorted(self.dropped_labels.items(), key=lambda pair: (-pair[1], pair[0]))
        return {"tickets": self.unknown_labels, "labels": dict(common[:most])}

    @property
    def hash(self) -> str:
        """Of the kept tickets; the same for the same history on every machine."""
        payload = json.dumps(sorted(self.tickets), ensure_ascii=False).encode("utf-8")
        return hashlib.sha256(payload).hexdigest()[:16] if self.tickets else "none"


def _cache_key(
    export: TicketExport, days: list[str], intents: list[str], excluded: set[tuple[str, str]]
) -> str | None:
    """A key that changes whenever the history could: None when a day has no file time."""
    stamps = [export.day_changed_at(date.fromisoformat(day)) for day in days]
    if any(stamp is None for stamp in stamps):
        return None
    payload = [2, export.describe(), days, stamps, sorted(intents), sorted(excluded)]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()[:24]


def labelled_history(
    export: TicketExport,
    days: list[str],
    intents: list[str],
    excluded: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
    cache: StagePath | None = None,
) -> LabelledHistory:
    """The labelled tickets of `days` (see the module docstring); `excluded` holds the
    evaluation set's (subject, body) pairs; `cache`, a folder to keep file exports' reads."""
    key = _cache_key(export, days, intents, excluded) if cache is not None and days else None
    path = cache / f"{key}.json" if cache is not None and key is not None else None
    if path is not None and path.is_file():
        stored = json.loads(path.read_bytes())
        return LabelledHistory(
            stored["days"],
            [tuple(t) for t in stored["tickets"]],
            stored["dropped_labels"],
            stored["held_out"],
            stored["missing_days"],
        )
    history = _read(export, days, intents, excluded)
    if path is not None:
        path.write_bytes(json.dumps(asdict(history), ensure_ascii=False).encode("utf-8"))
    return history


def _read(
    export: TicketExport, days: list[str], intents: list[str], excluded: set[tuple[str, str]]
) -> LabelledHistory:
    known = {*intents, UNKNOWN}
    kept: list[tuple[str, str, str]] = []
    dropped: dict[str, int] = {}
    missing: list[str] = []
    held = 0
    for day in days:
        try:
            rows = list(export.read_day(date.fromisoformat(day)))
        except ExportMissingError:
            missing.append(day)
            continue
        for row in rows:
            label, body = row.get("label"), row.get("body")
            if not isinstance(label, str) or not label.strip():
                continue
            if not isinstance(body, str) or not body.strip():
                continue
            subject = row.get("subject") if isinstance(row.get("subject"), str) else ""
            if (subject, body) in excluded:
                held += 1
            elif label.strip() not in known:
                dropped[label.strip()] = dropped.get(label.strip(), 0) + 1
            else:
                kept.append((subject, body, label.strip()))
    return LabelledHistory(list(days), kept, dropped, held, missing)


def labelled_texts(
    taxonomy: Taxonomy, history: LabelledHistory, model: ResolvedModel, max_tokens: int
) -> tuple[list[str], list[int]]:
    """The taxonomy's examples and the labelled tickets as `model` reads them (its document
    prefix; a ticket cut as a day's is), each with its intent's number (`OUT_OF_SCOPE` for
    `unknown`): what the encoder is fine-tuned on and the head is trained on."""
    prefix, tokenizer = model.document_prefix, load_tokenizer(model.path)
    names = taxonomy.names
    examples = [(n, prefix + e) for n, i in enumerate(taxonomy.intents) for e in i.examples]
    tickets = [
        (
            OUT_OF_SCOPE if label == UNKNOWN else names.index(label),
            ticket_input(tokenizer, s, b, max_tokens, prefix),
        )
        for s, b, label in history.tickets
    ]
    pairs = examples + tickets
    return [t for _, t in pairs], [n for n, _ in pairs]
