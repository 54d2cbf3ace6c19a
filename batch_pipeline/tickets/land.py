"""Ticket stage 5, land: the day's tickets classified and written in one commit.

A ticket whose row in the generation already has the same input keeps that row untouched;
the others are classified (their vector from this run's execute, or one this model already
computed) and written; tickets gone from the export are removed. A ticket a provider has not
answered yet (`ExecuteAnswers.awaited`) keeps its earlier row, if it had one, and is neither
classified nor failed: the run that collects the answer lands it. All of it is one commit
scoped to the day (`IntentStore.replace_day`); with nothing to change there is no commit, so
replaying a run changes nothing.

With a cascade (`tickets.cascade`), the tickets classified now whose confidence is under the
generation's threshold are sent to its chat model before the commit; a valid answer replaces
the classifier's intent, and the row records which model answered and at what cost. A ticket
whose row is kept is not asked again, so a rerun escalates nothing already answered; a row
whose answer a provider has not returned yet (`answered_by` awaiting) is not kept, so the
next run asks again and collects it.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from batch_pipeline.stages.execute import ExecuteAnswers
from batch_pipeline.state.staging import StagePath, read_batches, read_table
from batch_pipeline.state.tracking import FailureRecord
from batch_pipeline.tickets import TICKET_EXECUTE
from batch_pipeline.tickets.cascade.chat import ChatAnswer, DayCascade
from batch_pipeline.tickets.classifier.heads import IntentClassifier
from batch_pipeline.tickets.collect import failure_key
from batch_pipeline.tickets.intent_store import AWAITING, CLASSIFIER, IntentStore, intent_schema
from batch_pipeline.tickets.mix import IntentMix


@dataclass(frozen=True)
class DayTarget:
    """Where and under what a day lands: the generation's table and its lineage."""

    index: str
    day: str
    run_id: str
    model_fingerprint: str
    taxonomy_version: str
    dimension: int


@dataclass
class TicketLandSummary:
    tickets_classified: int = 0  # by this run
    tickets_unchanged: int = 0
    tickets_removed: int = 0
    tickets_awaiting: int = 0  # a provider has yet to answer for them: the next run lands them
    # the cascade's (`cascade`: one is configured), of the tickets classified now: sent to
    # the chat model, answered by it (valid answers), and what its answers cost
    cascade: bool = False
    tickets_escalated: int = 0
    tickets_chat_answered: int = 0
    tickets_answer_awaiting: int = 0  # at a provider: the classifier's intent meanwhile
    # of those escalated, a kept answer: the same text asked before (by any generation asking
    # the same question), or twice in this day
    tickets_answer_reused: int = 0
    escalation_cost: float = 0.0
    table_version: int | None = None
    committed: bool = False
    failures: list[FailureRecord] = field(default_factory=list)
    mix: IntentMix = field(default_factory=IntentMix)
    intents: list[str] = field(default_factory=list)  # the taxonomy's, in its order

    def metadata(self) -> dict[str, object]:
        return {
            "tickets_newly_classified": self.tickets_classified,
            "tickets_unchanged": self.tickets_unchanged,
            "tickets_removed": self.tickets_removed,
            "tickets_failed": len(self.failures),
            "tickets_awaiting": self.tickets_awaiting,
            **(
                {
                    "tickets_escalated": self.tickets_escalated,
                    "tickets_chat_answered": self.tickets_chat_answered,
                    "tickets_answer_awaiting": self.tickets_answer_awaiting,
                    "tickets_answer_reused": self.tickets_answer_reused,
                    "escalation_cost": round(self.escalation_cost, 6),
                }
                if self.cascade
                else {}
            ),
            "committed": self.committed,
            **self.mix.metadata(self.intents),
        }


def _vectors_by_input(embeddings: StagePath | Path) -> dict[str, np.ndarray]:
    vectors: dict[str, np.ndarray] = {}
    for batch in read_batches(embeddings, ["input_hash", "vector"]):
        keys = batch["input_hash"].to_pylist()
        values = batch["vector"].flatten().to_numpy().reshape(len(keys), -1)
        vectors.update(zip(keys, values, strict=True))
    return vectors


def escalated(head_intent: str, answer: ChatAnswer | None, cascade: DayCascade) -> dict:
    """A row's cascade columns: the chat model's intent where it answered validly (the
    `intent` key overrides the classifier's), which model answered, and the answer's cost."""
    columns = {"head_intent": head_intent, "answered_by": CLASSIFIER, "answer_cost": 0.0}
    if answer is None:
        return columns
    if answer.awaiting:
        return {**columns, "answered_by": AWAITING}
    columns["answer_cost"] = answer.cost  # an invalid answer was paid for too
    if answer.intent is not None:
        columns.update(intent=answer.intent, answered_by=cascade.model_name)
    return columns


def land_day(
    intents: IntentStore,
    target: DayTarget,
    inputs_path: StagePath | Path,
    embeddings_path: StagePath | Path,
    known_vectors: Callable[[], dict[str, np.ndarray]],
    classifier: Callable[[], IntentClassifier],
    hold_deletions: Callable[[int, int], str | None],
    cascade: DayCascade | None = None,
) -> TicketLandSummary:
    """Classify and write the day (see the module docstring). `known_vectors()` gives vectors
    this model computed before, by input hash; `classifier()` is only called if some ticket
    needs classifying. Tickets gone from the export that `hold_deletions` (the run frame's
    mass-deletion guard) holds back keep their rows: an export that shrank that far is more
    likely broken. `cascade` sends the least sure of the tickets classified to a chat model
    (see the module docstring)."""
    summary = TicketLandSummary(cascade=cascade is not None)
    schema = intent_schema(target.dimension, cascade is not None)
    columns = ["ticket_id", "channel", "input_hash", "input_text"]
    inputs = read_table(inputs_path, columns).to_pylist()
    existing = intents.day_rows(target.index, target.day)
    ids = existing["ticket_id"].to_pylist() if existing.num_rows else []
    by_ticket = {ticket_id: i for i, ticket_id in enumerate(ids)}
    existing_hashes = existing["input_hash"].to_pylist() if existing.num_rows else []
    if existing.num_rows and "answered_by" in existing.column_names:  # awaited: asked again
        awaited = [by == AWAITING for by in existing["answered_by"].to_pylist()]
        existing_hashes = [None if a else h for h, a in zip(existing_hashes, awaited, strict=True)]
    keep: list[int] = []
    todo: list[dict] = []
    for row in inputs:
        at = by_ticket.get(row["ticket_id"])
        if at is not None and existing_hashes[at] == row["input_hash"]:
            keep.append(at)
        else:
            todo.append(row)
    summary.tickets_unchanged = len(keep)
    listed = {row["ticket_id"] for row in inputs}
    gone = [at for ticket_id, at in by_ticket.items() if ticket_id not in listed]
    new = sum(1 for row in inputs if row["ticket_id"] not in by_ticket)
    if hold_deletions(len(gone), new) is not None:
        keep += gone
    else:
        summary.tickets_removed = len(gone)
    new_rows = pa.Table.from_pylist([], schema=schema)
    if todo:
        computed = _vectors_by_input(embeddings_path)
        answers = ExecuteAnswers.of(embeddings_path)
        earlier = known_vectors() if any(r["input_hash"] not in computed for r in todo) else {}
        ready = []
        for row in todo:
            vector = computed.get(row["input_hash"])
            vector = vector if vector is not None else earlier.get(row["input_hash"])
            if vector is None and answers.awaited(row["input_hash"]):
                summary.tickets_awaiting += 1  # its earlier row, if any, stays until then
                if row["ticket_id"] in by_ticket:
                    keep.append(by_ticket[row["ticket_id"]])
            elif vector is None:
                summary.failures.append(
                    FailureRecord(
                        doc_id=failure_key(target.day, row["ticket_id"]),
                        stage=TICKET_EXECUTE.name,
                        reason="inference_failed",
                        error_class="InferenceError",
                        message=answers.reason(
                            row["input_hash"], "no vector was computed for this ticket's input"
                        ),
                    )
                )
            else:
                ready.append((row, vector))
        if ready:
            vectors = np.stack([v for _, v in ready]).astype(np.float32)
            predictions = classifier().classify(vectors)
            chat = {}  # the cascade's answers, by input hash
            if cascade is not None:
                chat = cascade.escalate(
                    [(row["input_hash"], row["input_text"]) for row, _ in ready],
                    [p.confidence for p in predictions],
                )
                asked = [chat[r["input_hash"]] for r, _ in ready if r["input_hash"] in chat]
                summary.tickets_escalated = sum(not a.awaiting for a in asked)
                summary.tickets_answer_awaiting = len(asked) - summary.tickets_escalated
                summary.tickets_chat_answered = sum(a.intent is not None for a in asked)
                summary.tickets_answer_reused = sum(a.reused for a in asked)
                # paid once per request: tickets with the same input share one answer
                summary.escalation_cost = sum(a.cost for a in chat.values())
            now = datetime.now(UTC)
            new_rows = pa.Table.from_pylist(
                [
                    {
                        "ticket_id": row["ticket_id"],
                        "day": target.day,
                        "channel": row["channel"],
                        "intent": p.intent,
                        **(
                            escalated(p.intent, chat.get(row["input_hash"]), cascade)
                            if cascade is not None
                            else {}
                        ),
                        "confidence": p.confidence,
                        "top_intents": [name for name, _ in p.top],
                        "top_scores": [score for _, score in p.top],
                        "input_text": row["input_text"],
                        "input_hash": row["input_hash"],
                        "vector": vector,
                        "model_fingerprint": target.model_fingerprint,
                        "taxonomy_version": target.taxonomy_version,
                        "run_id": target.run_id,
                        "classified_at": now,
                    }
                    for (row, vector), p in zip(ready, predictions, strict=True)
                ],
                schema=schema,
            )
            summary.tickets_classified = new_rows.num_rows
    kept = existing.take(pa.array(sorted(keep), pa.int64())) if keep else None
    changed = summary.tickets_classified or summary.tickets_removed
    if changed or not intents.store.has_table(target.index):
        day = pa.concat_tables([kept.cast(new_rows.schema), new_rows]) if kept else new_rows
        summary.table_version = intents.replace_day(target.index, target.day, day)
        summary.committed = True
    else:
        table = intents.store.open(target.index)
        summary.table_version = table.version if table is not None else None
    final = intents.day_rows(target.index, target.day, ["intent", "confidence"])
    summary.mix = IntentMix.of(final["intent"].to_pylist(), final["confidence"].to_pylist())
    return summary
