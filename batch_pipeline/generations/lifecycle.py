"""One collection's generation for one configuration: tracked after each land, reviewed by
the evaluation gate, promoted, read through the live pointer, and dropped after retirement.

`GenerationLifecycle` holds this logic for the pipeline, the Dagster assets and the CLI alike;
it returns dataclasses, and reports warnings as a field.
"""

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from batch_pipeline.config import CollectionConfig, ModelConfig
from batch_pipeline.generations.evaluation import gate, load_eval_set, score_generation
from batch_pipeline.generations.registry import (
    BUILDING,
    CANDIDATE,
    DROPPED,
    LIVE,
    RETIRED,
    GenerationRegistry,
    generation_complete,
)
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import ResolvedModel, resolve_model
from batch_pipeline.names import generation_index
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore

EmbedderFor = Callable[[ResolvedModel], Embedder]


class NoLiveGenerationError(RuntimeError):
    """A reader asked for a collection that has never been promoted."""


@dataclass(frozen=True)
class LiveGeneration:
    """What every reader uses: the live generation's table and the model that built it."""

    index: str
    model: ModelConfig


@dataclass(frozen=True)
class GenerationReview:
    """The outcome of reviewing a generation after a run."""

    generation: str
    fingerprint: str
    state: str  # after the review
    complete: bool
    documents: int
    rows: int
    live_generation: str | None  # after the review
    decision: str  # live, promoted or refused
    reason: str
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    evaluated: bool = True  # False: nothing changed since the last review, which stands

    @classmethod
    def of(
        cls,
        record: GenerationRecord,
        live: GenerationRecord | None,
        decision: str,
        reason: str,
        scores: dict,
        warnings: tuple[str, ...] = (),
        evaluated: bool = True,
    ) -> "GenerationReview":
        """A review of the generation `record`, with `live` the live one after it."""
        return cls(
            generation=record.index_name,
            fingerprint=record.fingerprint,
            state=record.state,
            complete=record.complete,
            documents=record.documents,
            rows=record.rows,
            live_generation=live.index_name if live else None,
            decision=decision,
            reason=reason,
            scores=scores,
            warnings=warnings,
            evaluated=evaluated,
        )

    def metadata(self) -> dict[str, object]:
        """Flat values for run metadata and `--json` output (absent values omitted)."""
        values: dict[str, object] = {
            "generation": self.generation,
            "fingerprint": self.fingerprint,
            "state": self.state,
            "complete": self.complete,
            "documents": self.documents,
            "rows": self.rows,
            "decision": self.decision,
            "reason": self.reason,
            "evaluated": self.evaluated,
            **{f"candidate_{k}": v for k, v in self.scores.get("candidate", {}).items()},
            **{f"live_{k}": v for k, v in self.scores.get("live", {}).items()},
        }
        if self.live_generation is not None:
            values["live_generation"] = self.live_generation
        if self.warnings:
            values["warnings"] = list(self.warnings)
        return values


class GenerationLifecycle:
    """The generation a collection's current configuration builds (one model fingerprint)."""

    def __init__(
        self,
        collection: CollectionConfig,
        model_config: ModelConfig,
        model: ResolvedModel,
        fingerprint: str,
        tracking: TrackingStore,
        store: VectorStore,
    ) -> None:
        self.collection = collection
        self.model_config = model_config
        self.model = model
        self.fingerprint = fingerprint
        self.index = generation_index(collection.name, fingerprint)
        self.tracking = tracking
        self.store = store
        self.registry = GenerationRegistry(tracking)

    @property
    def name(self) -> str:
        return self.collection.name

    def record(self) -> GenerationRecord:
        """This configuration's generation record (registered on first use)."""
        return self.registry.ensure(
            self.name, self.fingerprint, self.index, self.model_config.model_dump(mode="json")
        )

    def track(self, full_pass_partitions: Iterable[str] = ()) -> None:
        """After a land (under the landing lease): count rows and documents, note the
        partitions that had a full pass, move `building` to `candidate` once complete, and
        promote the collection's first complete generation."""
        record = self.record()
        passes = record.passed_partitions() | set(full_pass_partitions)
        full = passes >= set(self.collection.partition_keys())  # every shard had a full pass
        complete = generation_complete(full, self.tracking.freshness(self.index)["pending"])
        state = CANDIDATE if record.state == BUILDING and complete else record.state
        self.registry.update(
            self.name,
            self.fingerprint,
            full_pass=full,
            full_passes=json.dumps(sorted(passes)),
            complete=complete,
            state=state,
            rows=self.store.count_rows(self.index),
            documents=self.tracking.document_count(self.index),
        )
        if state == CANDIDATE and self.registry.live(self.name) is None:
            self.registry.promote(
                self.name,
                self.fingerprint,
                "first complete generation",
                actor="pipeline",
                already_live_ok=True,
            )

    def live(self) -> LiveGeneration:
        """The live generation (what every reader uses), or NoLiveGenerationError."""
        live = self.registry.live(self.name)
        if live is None:
            raise NoLiveGenerationError(
                f"collection {self.name!r} has no live generation yet; "
                "materialise it first (make demo)"
            )
        return LiveGeneration(live.index_name, ModelConfig.model_validate_json(live.model_config))

    def _scores(self, embedder_for: EmbedderFor, live: GenerationRecord | None) -> dict:
        evaluation = self.collection.evaluation
        if evaluation is None:
            return {}
        queries = load_eval_set(evaluation.path)
        scores = {
            "candidate": score_generation(
                self.store,
                self.index,
                embedder_for(self.model),
                queries,
                evaluation.k,
                self.model.query_prefix,
            )
        }
        if live is not None and live.fingerprint != self.fingerprint:
            live_model = resolve_model(ModelConfig.model_validate_json(live.model_config))
            scores["live"] = score_generation(
                self.store,
                live.index_name,
                embedder_for(live_model),
                queries,
                evaluation.k,
                live_model.query_prefix,
            )
        return scores

    def _review_key(self, record: GenerationRecord) -> str:
        """What a review depends on: this table's version and completeness, and the live
        generation's table and version."""
        live = self.registry.live(self.name)
        table = self.store.open(self.index)
        live_table = self.store.open(live.index_name) if live is not None else None
        return json.dumps(
            {
                "version": table.version if table is not None else None,
                "complete": record.complete,
                "documents": record.documents,
                "live": live.index_name if live is not None else None,
                "live_version": live_table.version if live_table is not None else None,
            },
            sort_keys=True,
        )

    def needs_review(self) -> bool:
        """Whether anything a review depends on changed since the last one."""
        record = self.record()
        return record.decision is None or record.reviewed_key != self._review_key(record)

    def review(self, embedder_for: EmbedderFor, force: bool = True) -> GenerationReview:
        """Score this generation (and live) on the evaluation set; promote it if the gate
        allows. The decision and scores are also recorded on the generation. Unless `force`,
        a generation unchanged since its last review keeps that review, and no model loads."""
        record = self.record()
        if not force and not self.needs_review():
            return self._last_review(record)
        scores = self._scores(embedder_for, self.registry.live(self.name))
        warnings: tuple[str, ...] = ()
        if record.state == LIVE:
            decision, reason = "live", "this generation is live"
        else:
            evaluation = self.collection.evaluation
            verdict = gate(
                record.complete,
                scores.get("candidate"),
                scores.get("live"),
                evaluation.tolerance if evaluation else 0.0,
            )
            if verdict.allowed:
                self.registry.promote(
                    self.name, self.fingerprint, verdict.reason, "pipeline", already_live_ok=True
                )
            decision = "promoted" if verdict.allowed else "refused"
            reason, warnings = verdict.reason, verdict.warnings
        self.registry.update(
            self.name,
            self.fingerprint,
            scores=json.dumps(scores),
            decision=f"{decision}: {reason}",
        )
        record = self.record()
        self.registry.update(self.name, self.fingerprint, reviewed_key=self._review_key(record))
        return self._review(record, decision, reason, scores, warnings)

    def _last_review(self, record: GenerationRecord) -> GenerationReview:
        """The review recorded on the generation, unchanged (`evaluated` False)."""
        decision, _, reason = (record.decision or "").partition(": ")
        return self._review(
            record,
            decision,
            f"{reason} (unchanged since the last review)",
            json.loads(record.scores or "{}"),
            evaluated=False,
        )

    def _review(
        self,
        record: GenerationRecord,
        decision: str,
        reason: str,
        scores: dict,
        warnings: tuple[str, ...] = (),
        evaluated: bool = True,
    ) -> GenerationReview:
        return GenerationReview.of(
            record, self.registry.live(self.name), decision, reason, scores, warnings, evaluated
        )

    def drop_expired(self, retention: timedelta, now: datetime | None = None) -> list[str]:
        """Drop the tables of this collection's generations retired longer than `retention`
        ago (nightly). Returns the dropped tables."""
        cutoff = ((now or datetime.now(UTC)) - retention).timestamp()
        dropped = []
        for generation in self.registry.list_all(self.name):
            if generation.state != RETIRED or (generation.retired_at or 0) >= cutoff:
                continue
            self.store.drop_table(generation.index_name)
            self.registry.update(self.name, generation.fingerprint, state=DROPPED)
            self.registry.record(
                "drop",
                self.name,
                from_index=generation.index_name,
                details={"retired_at": generation.retired_at},
                actor="nightly",
            )
            dropped.append(generation.index_name)
        return dropped
