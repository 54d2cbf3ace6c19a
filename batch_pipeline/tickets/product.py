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

import io
import json
import uuid
from collections.abc import Callable
from datetime import date, timedelta
from functools import cached_property, partial

import numpy as np

from batch_pipeline.config import ConfigError, ModelConfig, PipelineConfig, TicketsConfig
from batch_pipeline.config.taxonomy import Taxonomy, load_taxonomy, parse_taxonomy
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
from batch_pipeline.inference.models import ResolvedModel, load_tokenizer, resolve_model
from batch_pipeline.sources import S3ClientFactory
from batch_pipeline.stages.prompt_plan import PromptPlanSettings
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets.cascade.chat import Escalation, HeldOutCascade, vllm_engine
from batch_pipeline.tickets.cascade.generation import GenerationCascade
from batch_pipeline.tickets.classifier.fine_tune import (
    ENCODERS,
    EncoderStore,
    encoder_key,
    fine_tuned_model,
    fine_tuned_name,
)
from batch_pipeline.tickets.classifier.heads import (
    IntentClassifier,
    Prediction,
    embed_prototypes,
    head_from_arrays,
    normalised,
)
from batch_pipeline.tickets.classifier.history import (
    LabelledHistory,
    labelled_history,
    labelled_texts,
)
from batch_pipeline.tickets.classifier.training import (
    ENCODER_HELD_OUT,
    NO_CALIBRATION,
    LabelsRefusedError,
    Thresholds,
    TrainingPool,
    TrainingReport,
    dropped_labels_text,
    encoder_texts,
    train_classifier,
)
from batch_pipeline.tickets.evaluation import load_labelled_tickets
from batch_pipeline.tickets.exports import TicketExport, make_export
from batch_pipeline.tickets.intent_store import IntentStore
from batch_pipeline.tickets.partition import DayPartition
from batch_pipeline.tickets.prepare import ticket_input
from batch_pipeline.tickets.review import AccuracyScorer, HoldsLiveDaysRule

ENCODER_WAIT_SLACK = 600  # seconds past a fine-tuning's budget another run waits for it


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
    def base_model(self) -> ResolvedModel:
        """The configured encoder (`model:`), as it ships."""
        return resolve_model(self.config.model)

    @cached_property
    def encoders(self) -> EncoderStore:
        """The product's fine-tuned encoders, under the home."""
        return EncoderStore(self.storage.home / ENCODERS / self.name)

    @cached_property
    def encoder_key(self) -> str | None:
        """The fine-tuned encoder's key (`tickets.training.fine_tune`); None when the
        encoder is not fine-tuned."""
        recipe = self.settings.training.fine_tune
        if recipe is None:
            return None
        return encoder_key(
            self.base_model, self.history.hash, self.taxonomy.version, self.settings.max_tokens,
            self.settings.training.validation_fraction, recipe,
        )  # fmt: skip

    @property
    def model_name(self) -> str:
        """The encoder's name, without training it: the configured model's, and the
        fine-tuned encoder's key where there is one."""
        if self.encoder_key is None:
            return self.base_model.name
        return fine_tuned_name(self.base_model.name, self.encoder_key)

    @cached_property
    def model(self) -> ResolvedModel:
        """The encoder that embeds the tickets: the configured one, or, with
        `tickets.training.fine_tune`, that one fine-tuned on the labelled tickets (trained
        here on first use, then read back from under the home)."""
        recipe = self.settings.training.fine_tune
        if recipe is None or self.encoder_key is None:
            return self.base_model
        folder = self.encoders.verified(self.encoder_key)
        if folder is not None:  # trained: no lease to take
            return fine_tuned_model(self.base_model, self.encoder_key, folder)
        # one process trains it; the others (a backfill's days) wait and read it back
        with self.tracking.landing_lease(
            f"encoder:{self.name}:{self.encoder_key}",
            owner=f"encoder training {uuid.uuid4().hex[:8]}",
            wait_seconds=recipe.max_minutes * 60 + ENCODER_WAIT_SLACK,
        ):
            return self.encoders.ready(
                self.encoder_key, self.base_model, recipe, self._encoder_texts
            )

    @cached_property
    def taxonomy(self) -> Taxonomy:
        return load_taxonomy(self.settings.taxonomy)

    @cached_property
    def model_fingerprint(self) -> str:
        """Everything that changes a ticket's vector: the model and the input cut."""
        identity = {"model": self.base_model.identity(), "max_tokens": self.settings.max_tokens}
        if self.encoder_key is not None:  # fine-tuned: a model of its own
            identity["fine_tune"] = self.encoder_key
        return fingerprint_of(identity)

    @cached_property
    def fingerprint(self) -> str:
        """The generation: the vectors' fingerprint, the taxonomy, the classifier setting,
        the labelled history's hash and how `unknown` is decided."""
        s = self.settings
        return fingerprint_of(
            {
                "model": self.model_fingerprint,
                "taxonomy": self.taxonomy.version,
                "min_confidence": s.min_confidence,
                "min_margin": s.min_margin,
                "classifier": s.classifier,
                "training": self.training_settings(),
                **({"cascade": self.cascade_settings()} if self.escalation else {}),
            }
        )

    @cached_property
    def history(self) -> LabelledHistory:
        """The labelled tickets of the training days, minus the evaluation set."""
        return self._history(self.settings.training.days())

    def _history(self, days: list[str]) -> LabelledHistory:
        excluded: set[tuple[str, str]] = set()
        if days and self.settings.evaluation is not None:
            held = load_labelled_tickets(self.settings.evaluation.path, self.taxonomy.names)
            excluded = {(t.subject, t.body) for t in held}
        cache = self.staging.root / "history"
        return labelled_history(self.export, days, self.taxonomy.names, excluded, cache)

    def training_settings(self) -> dict:
        """What the classifier is trained from and calibrated by (on the record and in the
        fingerprint)."""
        t = self.settings.training
        settings = {
            "days": t.days(),
            "history": self.history.hash,
            "validation_fraction": t.validation_fraction,
            "target_precision": t.target_precision,
            "calibration": t.calibration,
        }
        if t.fine_tune is not None:
            settings["fine_tune"] = {**t.fine_tune.model_dump(mode="json"), "key": self.encoder_key}
        return settings

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
            "model_fingerprint": self.model_fingerprint,
            "max_tokens": s.max_tokens,
            "taxonomy_version": self.taxonomy.version,
            "taxonomy": self.settings.taxonomy.read_text(encoding="utf-8"),
            "min_confidence": s.min_confidence,
            "min_margin": s.min_margin,
            "classifier": s.classifier,
            "training": self.training_settings(),
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
            settings, self.taxonomy.names, model, engine, self.config.cost.device_price,
            self.tracking,
        )  # fmt: skip

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
        frozen = self._frozen_scores if self.encoder_key is not None else None
        if self.escalation is None:
            return AccuracyScorer(evaluation, self._predict, frozen)
        cascades = self.cascades
        return AccuracyScorer(evaluation, self._predict, frozen, cascades.scores, cascades.awaiting)

    def frozen_twin(self) -> "TicketProduct":
        """This configuration with the encoder as it ships (no `fine_tune`): what a
        fine-tuned generation must beat."""
        training = self.settings.training.model_copy(update={"fine_tune": None})
        # the encoder is what it measures: the cascade's chat model is not asked again
        settings = self.settings.model_copy(update={"training": training, "cascade": None})
        return TicketProduct(
            self.config.model_copy(update={"tickets": settings}),
            self.storage, self.tracking, self.store, self.s3_client, self.execution,
        )  # fmt: skip

    def _frozen_scores(self, embedder_for: EmbedderFor) -> dict[str, float]:
        """The frozen twin's scores on the labelled tickets: its generation's where it was
        registered (it was live, say, before fine-tuning was turned on), else the same
        generation unregistered (its head trained and cached in staging, no table)."""
        twin = self.frozen_twin()
        record = twin.registry.get(twin.name, twin.fingerprint) or twin.registry.unregistered(
            twin.name, twin.fingerprint, twin.index, twin.generation_config()
        )
        evaluation = self.settings.evaluation
        return AccuracyScorer(evaluation, twin._predict).score(record, embedder_for)

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
            self.encoders.remove(tuned)

    def same_model_generations(self) -> list[str]:
        """Tables of this product's generations whose vectors this model computed."""
        return [
            g.index_name
            for g in self.registry.list_all(self.name)
            if g.state != DROPPED
            and json.loads(g.model_config).get("model_fingerprint") == self.model_fingerprint
        ]

    def classifier_for(
        self, record: GenerationRecord, embedder: Callable[[], Embedder]
    ) -> IntentClassifier:
        """A generation's classifier: trained once (see
        `batch_pipeline.tickets.classifier.training`) and cached in staging by fingerprint;
        what training chose goes on the record."""
        built = json.loads(record.model_config)
        taxonomy = parse_taxonomy(built["taxonomy"])
        if "classifier" not in built:  # built before classifiers were trained
            return self._prototype_classifier(record, built, taxonomy, embedder)
        cache = self.staging.root / "classifiers" / f"{record.fingerprint}.npz"
        cascade_ready = "cascade" not in built or self.cascades.held_out_file(record).is_file()
        if cache.is_file() and cascade_ready:
            with np.load(io.BytesIO(cache.read_bytes())) as stored:
                arrays = {k: stored[k] for k in stored.files}
            meta = json.loads(arrays.pop("meta").tobytes().decode("utf-8"))
            head = head_from_arrays(meta["classifier"], arrays)
            return IntentClassifier(
                taxonomy.names, head, meta["min_confidence"], meta["min_margin"]
            )
        classifier, report, notes = self._train(record, built, taxonomy, embedder())
        meta = np.frombuffer(json.dumps(report.as_dict()).encode("utf-8"), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, meta=meta, **classifier.head.arrays())
        cache.write_bytes(buffer.getvalue())
        self.registry.update(
            self.name,
            record.fingerprint,
            model_config=json.dumps({**built, "trained": {**report.as_dict(), **notes}}),
        )
        return classifier

    def _train(
        self, record: GenerationRecord, built: dict, taxonomy: Taxonomy, embedder: Embedder
    ) -> tuple[IntentClassifier, TrainingReport, dict]:
        """Embed the taxonomy and the record's labelled history, and train on them; with
        what the history left out, for the record: the labels that are no intent of the
        taxonomy (`dropped_summary`) and the training days whose export is missing."""
        training = built["training"]
        history = (
            self.history
            if training["days"] == self.settings.training.days()
            else self._history(training["days"])
        )
        if history.hash != training["history"]:
            raise ConfigError(
                f"the labelled tickets of {training['days'][0]}..{training['days'][-1]} "
                f"changed since generation {record.index_name} was built, so its classifier "
                "cannot be trained again as it was; use the current configuration's generation"
            )
        model = self.model_for(record)
        names = taxonomy.names
        texts, labels = labelled_texts(taxonomy, history, model, built["max_tokens"])
        inputs = [model.document_prefix + i.description for i in taxonomy.intents] + texts
        vectors = normalised(np.asarray(embedder.embed(inputs), dtype=np.float32))
        pool = TrainingPool(
            names,
            vectors[: len(names)],
            vectors[len(names) :],
            np.asarray(labels, dtype=int),
            texts,
            labelled_tickets=len(history.tickets),
        )
        dropped = history.dropped_summary()
        try:
            classifier, report = train_classifier(
                pool,
                built["classifier"],
                training["validation_fraction"],
                training["target_precision"],
                Thresholds(built["min_confidence"], built["min_margin"]),
                # a generation recorded before calibration was trained without it
                training.get("calibration", NO_CALIBRATION),
                # a fine-tuned encoder learned from every fold but this one
                ENCODER_HELD_OUT if training.get("fine_tune") else None,
            )
        except LabelsRefusedError as error:
            if dropped is None:
                raise
            raise LabelsRefusedError(f"{error}; {dropped_labels_text(dropped)}") from None
        notes = {
            "labels_not_in_taxonomy": dropped,
            "history_days_missing": history.missing_days or None,
        }
        if "cascade" in built:  # its threshold is chosen on the texts the head never saw
            budget = built["cascade"]["label_budget"]
            held = HeldOutCascade.of(report.held_out, texts, pool.labels, names, budget)
            self.cascades.held_out_file(record).write_bytes(json.dumps(held.as_dict()).encode())
        tuned = training.get("fine_tune")
        encoder = self.encoders.report(tuned["key"]) if tuned is not None else None
        if encoder is not None:  # the encoder's training, against the nightly window
            window = self.config.schedule.window_minutes
            notes["fine_tune"] = {**encoder.as_dict(), "window_minutes": window}
        return classifier, report, notes

    def _prototype_classifier(
        self,
        record: GenerationRecord,
        built: dict,
        taxonomy: Taxonomy,
        embedder: Callable[[], Embedder],
    ) -> IntentClassifier:
        """The classifier of a generation recorded before training existed: its prototypes
        and its fixed thresholds, as it was built."""
        cache = self.staging.root / "prototypes" / f"{record.fingerprint}.npy"
        if cache.is_file():
            prototypes = np.frombuffer(cache.read_bytes(), dtype=np.float32).reshape(
                len(taxonomy.intents), -1
            )
        else:
            prefix = self.model_for(record).document_prefix  # the model that built it
            prototypes = embed_prototypes(taxonomy, embedder(), prefix)
            cache.write_bytes(prototypes.astype(np.float32).tobytes())
        return IntentClassifier(
            taxonomy.names, prototypes, built["min_confidence"], built["min_margin"]
        )

    def trained(self, record: GenerationRecord | None = None) -> dict | None:
        """What training chose for a generation (this configuration's by default), as its
        record keeps it; None before it was trained, or for one built before training."""
        record = record or self.record()
        fresh = self.registry.get(self.name, record.fingerprint) or record
        return json.loads(fresh.model_config).get("trained")

    def classify_texts(
        self,
        texts: list[tuple[str, str]],
        embedder: Embedder,
        record: GenerationRecord | None = None,
    ) -> list:
        """Predictions for (subject, body) pairs, through the same input cut as a day's
        tickets; under `record`'s generation (default: this configuration's)."""
        record = record or self.record()
        model = self.model_for(record)
        max_tokens = json.loads(record.model_config)["max_tokens"]
        tokenizer = load_tokenizer(model.path)
        inputs = [
            ticket_input(tokenizer, s, b, max_tokens, model.document_prefix) for s, b in texts
        ]
        classifier = self.classifier_for(record, lambda: embedder)
        return classifier.classify(embedder.embed(inputs))

    def _predict(
        self, record: GenerationRecord, texts: list[tuple[str, str]], embedder_for: EmbedderFor
    ) -> list[Prediction]:
        """What generation `record` predicts for (subject, body) pairs."""
        embedder = embedder_for(self.model_for(record))
        return self.classify_texts(texts, embedder, record)

    def _encoder_texts(self) -> tuple[list[str], list[int]]:
        """What the encoder is fine-tuned on: this configuration's taxonomy examples and
        labelled tickets, with their intents' numbers, less the fold that then validates the
        head (`training.encoder_texts`)."""
        texts, labels = labelled_texts(
            self.taxonomy, self.history, self.base_model, self.settings.max_tokens
        )
        learns = encoder_texts(labels, texts, self.settings.training.validation_fraction)
        return [t for t, k in zip(texts, learns, strict=True) if k], [
            n for n, k in zip(labels, learns, strict=True) if k
        ]

    def model_for(self, record: GenerationRecord) -> ResolvedModel:
        """The encoder a generation was built with: its configured model, or that model
        fine-tuned (its folder checked; trained again only under this configuration)."""
        built = json.loads(record.model_config)
        base = resolve_model(ModelConfig.model_validate(built["model"]))
        tuned = built.get("training", {}).get("fine_tune")
        if tuned is None:
            return base
        if tuned["key"] == self.encoder_key:
            return self.model
        folder = self.encoders.verified(tuned["key"])
        if folder is None:
            raise ConfigError(
                f"generation {record.index_name}'s fine-tuned encoder is not under "
                f"{self.encoders.root} (dropped, or damaged); it can be trained again only "
                "under the configuration that built it"
            )
        return fine_tuned_model(base, tuned["key"], folder)


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
