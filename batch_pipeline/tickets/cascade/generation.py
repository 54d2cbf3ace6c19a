"""A ticket generation's cascade (`tickets.cascade`), as the product runs it: the threshold
chosen on the held-out texts its training kept and recorded on the generation, a day's
escalation with its ledgers, and the
cascade's figures on the labelled set for the review. The chat model and the arithmetic are
`cascade.chat`'s and `cascade.threshold`'s."""

import json
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from batch_pipeline.config import ConfigError
from batch_pipeline.executors.batch_api import BatchLedger
from batch_pipeline.state.tracking import GenerationRecord
from batch_pipeline.tickets.cascade.chat import (
    CASCADE_PARTITION,
    EVALUATION_PARTITION,
    HELD_OUT_PARTITION,
    CascadePending,
    DayCascade,
    HeldOutCascade,
    cascade_plan,
    cascade_scores,
)
from batch_pipeline.tickets.classifier.heads import Prediction
from batch_pipeline.tickets.classifier.training import TrainingReport
from batch_pipeline.tickets.prepare import ticket_text

if TYPE_CHECKING:
    from batch_pipeline.tickets.product import TicketProduct


class GenerationCascade:
    """The cascades of a product's generations (see the module docstring)."""

    def __init__(self, product: "TicketProduct") -> None:
        self.product = product

    def held_out_file(self, record: GenerationRecord):  # noqa: ANN201 - a StagePath
        """Where training keeps what the cascade's threshold is chosen on."""
        return self.product.staging.root / "classifiers" / f"{record.fingerprint}.cascade.json"

    def keep_held_out(
        self,
        record: GenerationRecord,
        built: dict,
        report: TrainingReport,
        texts: list[str],
        labels: np.ndarray,
        names: list[str],
    ) -> None:
        """What the generation's threshold is chosen on, kept when its classifier is
        trained: the texts its head never saw, at most the cascade's `label_budget`."""
        budget = built["cascade"]["label_budget"]
        held = HeldOutCascade.of(report.held_out, texts, labels, names, budget)
        self.held_out_file(record).write_bytes(json.dumps(held.as_dict()).encode())

    def ledger(self, record: GenerationRecord, partition: str) -> BatchLedger:
        """Where the generation's provider batches for `partition` are recorded."""
        return BatchLedger(self.product.tracking, record.index_name, partition)

    def plan(
        self, record: GenerationRecord, run_id: str, ledger: BatchLedger | None = None
    ) -> dict:
        """The generation's cascade plan: as its record keeps it, or chosen now on the
        held-out texts its training kept (`escalation.cascade_plan`) and recorded; raises
        CascadePending while a provider has some of their answers."""
        product = self.product
        trained = product.trained(record) or {}
        if "cascade" in trained:
            return trained["cascade"]
        held = json.loads(self.held_out_file(record).read_bytes())
        plan = cascade_plan(product.escalation, HeldOutCascade(**held), run_id, ledger)
        fresh = product.registry.get(product.name, record.fingerprint) or record
        built = json.loads(fresh.model_config)
        trained = {**built.get("trained", {}), "cascade": plan}
        product.registry.update(
            product.name, record.fingerprint, model_config=json.dumps({**built, "trained": trained})
        )
        return plan

    def day(self, record: GenerationRecord, run_id: str, day: str) -> DayCascade | None:
        """The generation's cascade for a day's land (None without one): its chat model, and
        its threshold, chosen once the classifier is trained; a provider's batches go to the
        generation's ledger, the day's and the held-out texts' apart."""
        product = self.product
        if "cascade" not in json.loads(record.model_config):
            return None
        if product.escalation is None or record.fingerprint != product.fingerprint:
            raise ConfigError(f"generation {record.index_name}'s cascade is not configured")
        escalation = product.escalation
        return DayCascade(
            escalation,
            partial(self.plan, record, run_id, self.ledger(record, HELD_OUT_PARTITION)),
            product.classifier.base_model.document_prefix,
            run_id,
            self.ledger(record, f"{day}/{CASCADE_PARTITION}"),
        )

    def awaiting(self, record: GenerationRecord) -> list[str]:
        """The generation's provider batches its review waits for, still uncollected: its
        held-out texts' and its labelled tickets' answers."""
        return [
            batch.batch_id
            for partition in (HELD_OUT_PARTITION, EVALUATION_PARTITION)
            for batch in self.ledger(record, partition).uncollected()
        ]

    def collecting_day(self, index: str, partition: str) -> str | None:
        """The day whose run collects the batches of the generation `index` recorded under
        the ledger's `partition`: a day's own (`<day>/cascade`), or, for its held-out texts'
        and its labelled tickets', the newest day it holds (a run of it asks its awaiting
        tickets again and reviews the generation); None where it holds none yet."""
        if partition not in (HELD_OUT_PARTITION, EVALUATION_PARTITION):
            return partition.removesuffix(f"/{CASCADE_PARTITION}")
        days = self.product.intents.days(index)
        return days[-1] if days else None

    def scores(
        self,
        record: GenerationRecord,
        tickets: list[tuple[str, str]],
        predictions: list[Prediction],
        labels: list[str],
    ) -> dict[str, float]:
        """The cascade's figures on the labelled set (`escalation.cascade_scores`), for a
        generation of this configuration's cascade; none while its threshold waits."""
        product = self.product
        if json.loads(record.model_config).get("cascade") != product.cascade_settings():
            return {}
        try:
            plan = self.plan(record, "review", self.ledger(record, HELD_OUT_PARTITION))
        except CascadePending:
            return {}
        texts = [ticket_text(subject, body) for subject, body in tickets]
        return cascade_scores(
            product.escalation,
            plan,
            texts,
            [p.confidence for p in predictions],
            [p.intent for p in predictions],
            labels,
            self.ledger(record, EVALUATION_PARTITION),
        )
