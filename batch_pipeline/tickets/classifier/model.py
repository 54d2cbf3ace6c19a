"""A ticket product's model: the encoder that embeds its tickets (as it ships, or
fine-tuned on the labelled tickets: `fine_tune`), the labelled history it learns from
(`history`), and each generation's classifier, trained once (`training`) and cached in
staging by fingerprint, with what training chose kept on the generation's record.

`TicketProduct` holds one (`product.classifier`) and asks it for its model, its fingerprint
and a generation's predictions; the cascade keeps the held-out texts its threshold is chosen
on when a classifier is trained (`HeldOutKeeper`).
"""

import io
import json
import uuid
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from batch_pipeline.config import ConfigError, ModelConfig, PipelineConfig, TicketsConfig
from batch_pipeline.config.taxonomy import Taxonomy, parse_taxonomy
from batch_pipeline.generations.registry import GenerationRegistry
from batch_pipeline.generations.review import EmbedderFor
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.fingerprint import fingerprint_of
from batch_pipeline.inference.models import ResolvedModel, load_tokenizer, resolve_model
from batch_pipeline.state.staging import StagingArea
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore
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
from batch_pipeline.tickets.exports import TicketExport
from batch_pipeline.tickets.prepare import ticket_input

ENCODER_WAIT_SLACK = 600  # seconds past a fine-tuning's budget another run waits for it


class HeldOutKeeper(Protocol):
    """Where a generation's cascade keeps the texts its threshold is chosen on: the texts a
    trained head never saw (`tickets.cascade.generation.GenerationCascade`)."""

    def held_out_file(self, record: GenerationRecord) -> Path: ...

    def keep_held_out(
        self,
        record: GenerationRecord,
        built: dict,
        report: TrainingReport,
        texts: list[str],
        labels: np.ndarray,
        names: list[str],
    ) -> None: ...


class TicketModel:
    """A ticket product's encoder, labelled history and generations' classifiers (see the
    module docstring)."""

    def __init__(
        self,
        config: PipelineConfig,
        storage: StorageLocations,
        staging: StagingArea,
        tracking: TrackingStore,
        registry: GenerationRegistry,
        taxonomy: Taxonomy,
        export: Callable[[], TicketExport],
        cascades: Callable[[], HeldOutKeeper],
    ) -> None:
        self.config = config
        self.settings: TicketsConfig = config.tickets
        self.name = self.settings.name
        self.storage = storage
        self.staging = staging
        self.tracking = tracking
        self.registry = registry
        self.taxonomy = taxonomy
        self.export = export  # the product's exports, read once the history is needed
        self.cascades = cascades  # the product's cascades, asked only where one is built

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
            self.base_model,
            self.history.hash,
            self.taxonomy.version,
            self.settings.max_tokens,
            self.settings.training.validation_fraction,
            recipe,
        )

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
    def model_fingerprint(self) -> str:
        """Everything that changes a ticket's vector: the model and the input cut."""
        identity = {"model": self.base_model.identity(), "max_tokens": self.settings.max_tokens}
        if self.encoder_key is not None:  # fine-tuned: a model of its own
            identity["fine_tune"] = self.encoder_key
        return fingerprint_of(identity)

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
        return labelled_history(self.export(), days, self.taxonomy.names, excluded, cache)

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
        cascade_ready = "cascade" not in built or self.cascades().held_out_file(record).is_file()
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
            self.cascades().keep_held_out(record, built, report, texts, pool.labels, names)
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

    def classify_texts(
        self,
        texts: list[tuple[str, str]],
        embedder: Embedder,
        record: GenerationRecord,
    ) -> list:
        """Predictions for (subject, body) pairs, through the same input cut as a day's
        tickets; under `record`'s generation."""
        model = self.model_for(record)
        max_tokens = json.loads(record.model_config)["max_tokens"]
        tokenizer = load_tokenizer(model.path)
        inputs = [
            ticket_input(tokenizer, s, b, max_tokens, model.document_prefix) for s, b in texts
        ]
        classifier = self.classifier_for(record, lambda: embedder)
        return classifier.classify(embedder.embed(inputs))

    def predict(
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
