"""The ticket product's two parts of the shared generation review
(`batch_pipeline.generations.review`): its completeness rule and its scorer.

- Complete: the generation holds every day the live one holds (backfill them first).
- Scores: accuracy and macro-F1 on the labelled tickets, with `min_accuracy` as a floor; with
  the share answered, accuracy on it, per-intent precision, recall and support, the most
  frequent confusions, and the expected calibration error of the top answers' confidences
  (`ece`; `ece_uncalibrated` with the head's own scores, where they are calibrated), which
  the gate does not compare.
- Baseline: a generation whose encoder is fine-tuned must be strictly more accurate than the
  same generation on the frozen encoder (`tickets.training.fine_tune`).
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from batch_pipeline.config import TicketEvaluationConfig
from batch_pipeline.config.taxonomy import parse_taxonomy
from batch_pipeline.generations.evaluation import Baseline, eval_set_version
from batch_pipeline.generations.review import Completeness, EmbedderFor
from batch_pipeline.state.tracking import GenerationRecord
from batch_pipeline.tickets.classifier.confidence import expected_calibration_error
from batch_pipeline.tickets.classifier.heads import Prediction
from batch_pipeline.tickets.evaluation import (
    classification_scores,
    intent_figures,
    load_labelled_tickets,
)
from batch_pipeline.tickets.intent_store import IntentStore

# What a generation predicts for (subject, body) pairs, with the models `embedder_for` loads.
Predict = Callable[[GenerationRecord, list[tuple[str, str]], EmbedderFor], list[Prediction]]
# a cascade generation's figures on the labelled set: (record, tickets, the classifier's
# predictions, the labels) -> cascade_accuracy, cascade_escalated_share, ...
CascadeScores = Callable[
    [GenerationRecord, list[tuple[str, str]], list[Prediction], list[str]], dict[str, float]
]
DAYS_NAMED = 3  # a refusal names at most this many days to backfill
FROZEN = "the frozen encoder"  # how the gate names a fine-tuned generation's baseline


@dataclass(frozen=True)
class HoldsLiveDaysRule:
    """Complete when the generation holds every day the live one holds."""

    intents: IntentStore

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        days = self.intents.days(record.index_name)
        live_days = self.intents.days(live.index_name) if live is not None else []
        key = {"days": len(days), "live_days": len(live_days)}
        if days and set(days) >= set(live_days):
            return Completeness(True, None, key)
        missing = sorted(set(live_days) - set(days))
        more = " ..." if len(missing) > DAYS_NAMED else ""
        reason = (
            f"not complete: holds {len(days)} of the live generation's days; "
            f"backfill {', '.join(missing[:DAYS_NAMED])}{more}"
            if missing
            else "not complete: holds no day yet"
        )
        return Completeness(False, reason, key)


@dataclass(frozen=True)
class AccuracyScorer:
    """Accuracy and macro-F1 on the labelled tickets, each generation with its own
    taxonomy and model; no generation goes live below `min_accuracy`."""

    evaluation: TicketEvaluationConfig
    predict: Predict
    # a fine-tuned generation's: the scores of the same generation on the frozen encoder
    frozen: Callable[[EmbedderFor], dict[str, float]] | None = None
    # a cascade generation's: its accuracy with the least sure tickets answered by the chat
    # model (figures beside the classifier's; the gate judges the classifier's)
    cascade: CascadeScores | None = None
    # a cascade generation's provider batches still out (its held-out or labelled tickets'
    # answers): its scores are not kept for reuse meanwhile
    awaiting: Callable[[GenerationRecord], list[str]] | None = None

    @property
    def tolerance(self) -> float:
        return self.evaluation.tolerance

    @property
    def floors(self) -> dict[str, float]:
        return {"accuracy": self.evaluation.min_accuracy}

    def key(self, record: GenerationRecord) -> dict[str, object]:
        # a generation's predictions depend on its record alone, not on the rows it holds;
        # while a provider holds its cascade's answers, each review scores afresh (which
        # collects them), so figures left out for want of them are never reused
        out = self.awaiting(record) if self.awaiting is not None else []
        key: dict[str, object] = {"eval_set": eval_set_version(self.evaluation.path)}
        return {**key, "awaiting": sorted(out), "at": time.time()} if out else key

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        taxonomy = parse_taxonomy(json.loads(record.model_config)["taxonomy"])
        labelled = load_labelled_tickets(self.evaluation.path, taxonomy.names)
        texts = [(t.subject, t.body) for t in labelled]
        predictions = self.predict(record, texts, embedder_for)
        labels = [t.label for t in labelled]
        predicted = [p.intent for p in predictions]
        return {
            **classification_scores(labels, predicted),
            **calibration_errors(labels, predictions),
            **intent_figures(labels, predicted),
            **(self.cascade(record, texts, predictions, labels) if self.cascade else {}),
        }

    def baseline(self, embedder_for: EmbedderFor) -> Baseline | None:
        """A fine-tuned generation must be more accurate than the frozen encoder's (the same
        taxonomy, history and head, on the configured model as it ships); None otherwise."""
        if self.frozen is None:
            return None
        return Baseline(FROZEN, self.frozen(embedder_for), ("accuracy",))


def calibration_errors(labels: list[str], predictions: list[Prediction]) -> dict[str, float]:
    """The expected calibration error of the top answers (`unknown` or not) on the labelled
    set: with the confidences the rows carry (`ece`) and, where those are calibrated, with
    the head's own scores (`ece_uncalibrated`)."""
    right = np.asarray([p.top[0][0] == y for p, y in zip(predictions, labels, strict=True)])
    errors = {"ece": expected_calibration_error([p.confidence for p in predictions], right)}
    if predictions and all(p.raw_confidence is not None for p in predictions):
        own = [p.raw_confidence for p in predictions]
        errors["ece_uncalibrated"] = expected_calibration_error(own, right)
    return {k: round(v, 4) for k, v in errors.items() if v is not None}
