"""The ticket intent product: its configuration, generations, classifier and review.

`TicketProduct` binds the ticket configuration to the shared storage; its `day()` is a
`DayPartition` (`tickets.partition`), which runs one day (a Dagster daily partition)
collect -> prepare -> plan -> execute -> land. Plan and execute are
the vector index's own stages; the run frame (`batch_pipeline.runs`) records each run, and
the shared generation review (`batch_pipeline.generations.review`) gates each generation with
this product's rule and scorer (`tickets.review`).

A generation is one taxonomy version under one model, with one classifier setting and one
labelled history (`tickets.training`): its LanceDB table is `<tickets name>__<fingerprint>`.
Its classifier is trained once, when first needed, and cached in staging by fingerprint; what
training chose (and every candidate's score) is kept on the generation's record. Editing the
taxonomy (or the training window) starts a new generation beside the live one; it is
promoted when it holds every day the live one holds (backfill them) and the evaluation gate
finds it no worse than live. Rollback is the registry's.
"""

import json
from collections.abc import Callable
from datetime import date, timedelta
from functools import cached_property, partial

from batch_pipeline.config import ConfigError, PipelineConfig, TicketsConfig
from batch_pipeline.config.taxonomy import Taxonomy, load_taxonomy
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.generations.registry import DROPPED
from batch_pipeline.generations.review import (
    EmbedderFor,
    ReviewedGenerations,
)
from batch_pipeline.inference.chat_models import resolve_chat_model
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.fingerprint import fingerprint_of
from batch_pipeline.inference.generator import Generator
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.sources import S3ClientFactory
from batch_pipeline.stages.prompt_plan import PromptPlanSettings
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets.cascade.chat import Escalation, vllm_engine
from batch_pipeline.tickets.cascade.generation import GenerationCascade
from batch_pipeline.tickets.classifier.heads import (
    Prediction,
)
from batch_pipeline.tickets.classifier.model import TicketModel
from batch_pipeline.tickets.exports import TicketExport, make_export
from batch_pipeline.tickets.intent_store import IntentStore
from batch_pipeline.tickets.partition import DayPartition
from batch_pipeline.tickets.review import AccuracyScorer, HoldsLiveDaysRule


def tickets_config(config: PipelineConfig) -> TicketsConfig:
    if config.tickets is None:
        raise ConfigError(
            "tickets: not configured (add a `tickets:` section; see docs/ticket-intents.md)"
        )
    return config.tickets


def due_days(settings: TicketsConfig, today: date | None = None) -> list[str]:
    """Every daily partition key, from `start_date` to yesterday, oldest first."""
    first = date.fromisoformat(settings.start_date)
    last = (today or date.today()) - timedelta(days=1)
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def parse_day(value: str | date, settings: TicketsConfig) -> date:
    """A partition key as a date, checked against `tickets.start_date`."""
    try:
        day = value if isinstance(value, date) else date.fromisoformat(str(value))
    except ValueError:
        raise ConfigError(f"{value!r} is not a day (YYYY-MM-DD)") from None
    if day < date.fromisoformat(settings.start_date):
        raise ConfigError(f"{day} is before tickets.start_date ({settings.start_date})")
    return day


class TicketProduct(ReviewedGenerations):
    """What every day shares: the configuration, the taxonomy, the model, the generations."""

    def __init__(
        self,
        config: PipelineConfig,
        storage: StorageLocations,
        tracking: TrackingStore | None = None,
        store: VectorStore | None = None,
        s3_client: S3ClientFactory | None = None,
        execution: ExecutorChoice | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.config = config
        self.generator = generator  # the cascade's chat model (None: vLLM on its settings)
        self.execution = execution or ExecutorChoice()  # which executor embeds, and on what
        self.settings = tickets_config(config)
        self.storage = storage
        self.tracking = tracking or TrackingStore(storage.tracking_url)
        self.store = store or VectorStore(storage.lancedb_uri, storage.storage_options)
        self.intents = IntentStore(self.store)
        self.staging = storage.staging()
        self.s3_client = s3_client

    @property
    def name(self) -> str:
        return self.settings.name

    @cached_property
    def classifier(self) -> TicketModel:
        """Its encoder, labelled history and generations' classifiers."""
        return TicketModel(
            self.config,
            self.storage,
            self.staging,
            self.tracking,
            self.registry,
            self.taxonomy,
            lambda: self.export,
            lambda: self.cascades,
        )

    @property
    def model(self) -> ResolvedModel:
        """The encoder that embeds the tickets (`TicketModel.model`): what a run loads."""
        return self.classifier.model

    def classify_texts(
        self,
        texts: list[tuple[str, str]],
        embedder: Embedder,
        record: GenerationRecord | None = None,
    ) -> list[Prediction]:
        """Predictions for (subject, body) pairs under `record`'s generation (default: this
        configuration's), as a day's tickets are classified."""
        return self.classifier.classify_texts(texts, embedder, record or self.record())

    @cached_property
    def taxonomy(self) -> Taxonomy:
        return load_taxonomy(self.settings.taxonomy)

    @cached_property
    def fingerprint(self) -> str:
        """The generation: the vectors' fingerprint, the taxonomy, the classifier setting,
        the labelled history's hash and how `unknown` is decided."""
        s = self.settings
        return fingerprint_of(
            {
                "model": self.classifier.model_fingerprint,
                "taxonomy": self.taxonomy.version,
                "min_confidence": s.min_confidence,
                "min_margin": s.min_margin,
                "classifier": s.classifier,
                "training": self.classifier.training_settings(),
                **({"cascade": self.cascade_settings()} if self.escalation else {}),
            }
        )

    @cached_property
    def export(self) -> TicketExport:
        return make_export(self.settings.source, self.settings.timezone, self.s3_client)

    def day(self, value: str | date) -> "DayPartition":
        return DayPartition(self, parse_day(value, self.settings))

    def partition_days(self, today: date | None = None) -> list[str]:
        """Every daily partition key, from `start_date` to yesterday."""
        return due_days(self.settings, today)

    # -------------------------------------------------------------- generations

    def generation_config(self) -> dict:
        """What a generation is built from, kept on its record (so the live generation's
        classifier can be rebuilt after the configuration moved on)."""
        s = self.settings
        return {
            "model": self.config.model.model_dump(mode="json"),
            "model_fingerprint": self.classifier.model_fingerprint,
            "max_tokens": s.max_tokens,
            "taxonomy_version": self.taxonomy.version,
            "taxonomy": self.settings.taxonomy.read_text(encoding="utf-8"),
            "min_confidence": s.min_confidence,
            "min_margin": s.min_margin,
            "classifier": s.classifier,
            "training": self.classifier.training_settings(),
            **({"cascade": self.cascade_settings()} if self.escalation else {}),
        }

    @cached_property
    def escalation(self) -> Escalation | None:
        """The cascade's chat model (`tickets.cascade`); None without one."""
        settings = self.settings.cascade
        if settings is None:
            return None
        if self.generator is not None:
            model = self.generator.model
            engine = lambda: (self.generator, PromptPlanSettings())  # noqa: E731
        else:
            model = resolve_chat_model(settings.chat_model, self.storage.home)
            engine = partial(vllm_engine, model, self.storage.home, self.execution.device)
        return Escalation(
            settings,
            self.taxonomy.names,
            model,
            engine,
            self.config.cost.device_price,
            self.tracking,
        )

    @cached_property
    def cascades(self) -> GenerationCascade:
        """Its generations' cascades: their thresholds, days and scores."""
        return GenerationCascade(self)

    def cascade_settings(self) -> dict:
        """What decides the cascade's answers and threshold (on the record and in the
        fingerprint): the guarantee asked for and the chat model's identity."""
        s = self.settings.cascade
        guarantee = {"target_accuracy": s.target_accuracy, "delta": s.delta}
        return {**guarantee, "label_budget": s.label_budget, **self.escalation.identity()}

    # its generations: the frame's reviewer, with its rule and scorer
    no_live_hint = "classify a day first (batch-pipeline run --day YYYY-MM-DD)"

    def completeness_rule(self) -> HoldsLiveDaysRule:
        """Holds every day the live generation holds."""
        return HoldsLiveDaysRule(self.intents)

    def scorer(self) -> AccuracyScorer | None:
        """Accuracy on the labelled tickets, where there are any."""
        evaluation = self.settings.evaluation
        if evaluation is None:
            return None
        frozen = self._frozen_scores if self.classifier.encoder_key is not None else None
        if self.escalation is None:
            return AccuracyScorer(evaluation, self.classifier.predict, frozen)
        cascades = self.cascades
        return AccuracyScorer(
            evaluation, self.classifier.predict, frozen, cascades.scores, cascades.awaiting
        )

    def frozen_twin(self) -> "TicketProduct":
        """This configuration with the encoder as it ships (no `fine_tune`): what a
        fine-tuned generation must beat."""
        training = self.settings.training.model_copy(update={"fine_tune": None})
        # the encoder is what it measures: the cascade's chat model is not asked again
        settings = self.settings.model_copy(update={"training": training, "cascade": None})
        return TicketProduct(
            self.config.model_copy(update={"tickets": settings}),
            self.storage,
            self.tracking,
            self.store,
            self.s3_client,
            self.execution,
        )

    def _frozen_scores(self, embedder_for: EmbedderFor) -> dict[str, float]:
        """The frozen twin's scores on the labelled tickets: its generation's where it was
        registered (it was live, say, before fine-tuning was turned on), else the same
        generation unregistered (its head trained and cached in staging, no table)."""
        twin = self.frozen_twin()
        record = twin.registry.get(twin.name, twin.fingerprint) or twin.registry.unregistered(
            twin.name, twin.fingerprint, twin.index, twin.generation_config()
        )
        evaluation = self.settings.evaluation
        return AccuracyScorer(evaluation, twin.classifier.predict).score(record, embedder_for)

    def drop_tables(self, index: str) -> None:
        """A generation's table, its fine-tuned encoder where no other generation that is
        not dropped uses it, and the chat model's kept answers to its cascade's question
        where no such generation asks it."""
        super().drop_tables(index)
        configs = {
            g.index_name: (json.loads(g.model_config), g.state)
            for g in self.registry.list_all(self.name)
        }
        question = _held_alone(configs, index, lambda c: (c.get("cascade") or {}).get("question"))
        if question is not None:
            self.tracking.drop_chat_answers([question])
        tuned = _held_alone(
            configs, index, lambda c: ((c.get("training") or {}).get("fine_tune") or {}).get("key")
        )
        if tuned is not None:
            self.classifier.encoders.remove(tuned)

    def same_model_generations(self) -> list[str]:
        """Tables of this product's generations whose vectors this model computed."""
        fingerprint = self.classifier.model_fingerprint
        return [
            g.index_name
            for g in self.registry.list_all(self.name)
            if g.state != DROPPED
            and json.loads(g.model_config).get("model_fingerprint") == fingerprint
        ]

    def trained(self, record: GenerationRecord | None = None) -> dict | None:
        """What training chose for a generation (this configuration's by default), as its
        record keeps it; None before it was trained, or for one built before training."""
        record = record or self.record()
        fresh = self.registry.get(self.name, record.fingerprint) or record
        return json.loads(fresh.model_config).get("trained")


def _held_alone(
    configs: dict[str, tuple[dict, str]], dropped: str, held: Callable[[dict], str | None]
) -> str | None:
    """What generation `dropped` holds (`held` of its record's config), where no other
    generation that is not dropped holds it too; None otherwise."""
    mine = held(configs[dropped][0]) if dropped in configs else None
    if mine is None:
        return None
    others = [s for i, (c, s) in configs.items() if i != dropped and held(c) == mine]
    return mine if all(state == DROPPED for state in others) else None
