"""One generation review for every product: completeness, scores against live, the gate, and
promotion.

A product brings two parts:
- a `CompletenessRule`: whether its generation may replace live at all ("had a full pass",
  "holds every day the live one holds"), and why not;
- a `GenerationScorer` (or none): its generations' scores on the product's labelled set (retrieval
  recall and MRR, classification accuracy), the tolerance against live and the floors, and,
  where readers have something without the product, the `Baseline` it must beat (a
  reranker: hybrid search alone).

`GenerationReviewer.review` does the rest the same way for all: a review whose inputs are
unchanged since the last one keeps it (no model loads) unless `force`; each generation's own
scores are kept on its record with what they depend on, so live is not scored again while its
table and the labelled set stay as they were; the gate takes every floor; a promotion is the
registry's one atomic switch.

The reviewer also owns the policies every product's generations follow, from
`generations:`: `review: every_run` re-evaluates on every call, and `drop_retired` drops
the tables of generations retired longer than `retention_days` (nightly). A product gets
them by handing its reviewer the settings and a way to drop a generation's tables.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Protocol

from batch_pipeline.config import GenerationsConfig
from batch_pipeline.generations.evaluation import Baseline, gate
from batch_pipeline.generations.registry import DROPPED, LIVE, RETIRED, GenerationRegistry
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.fingerprint import fingerprint_of
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.names import generation_index
from batch_pipeline.state.tracking import GenerationRecord

EmbedderFor = Callable[[ResolvedModel], Embedder]
PIPELINE = "pipeline"  # the audit log's actor for the reviews' promotions
NIGHTLY = "nightly"  # the audit log's actor for retention's drops


class NoLiveGenerationError(RuntimeError):
    """A reader asked for a product that has never been promoted."""


@dataclass(frozen=True)
class LiveGeneration:
    """What every reader uses: the live generation's table and its record."""

    index: str
    record: GenerationRecord


@dataclass(frozen=True)
class Completeness:
    """Whether a generation is complete enough to replace live, why not, and what that
    verdict depends on (a review is redone when it changes)."""

    complete: bool
    reason: str | None = None  # why not, and what to do; None when complete
    key: dict[str, object] = field(default_factory=dict)


class CompletenessRule(Protocol):
    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        """The generation `record` against the live one (None before any)."""
        ...


class GenerationScorer(Protocol):
    tolerance: float  # how much worse than live a score may be
    floors: dict[str, float]  # the least each named score must reach

    def key(self, record: GenerationRecord) -> dict[str, object] | None:
        """What the generation's scores depend on (the labelled set's version, its table's
        version where the scores read it); None when there is nothing to score against."""
        ...

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        """The generation's scores on the labelled set."""
        ...


class BaselineScorer(GenerationScorer, Protocol):
    """A scorer whose generations must also beat what readers get without them."""

    def baseline(self, embedder_for: EmbedderFor) -> Baseline:
        """The scores to beat, on the same labelled set."""
        ...


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
    precision: str | None = None  # the embedding precision class it was built under, if any
    # the reviews of generations reviewed with this one's (a collection's reranker)
    companions: tuple["GenerationReview", ...] = ()

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
            precision=record.precision,
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
            **({"precision": self.precision} if self.precision else {}),
            **{f"candidate_{k}": v for k, v in self.scores.get("candidate", {}).items()},
            **{f"live_{k}": v for k, v in self.scores.get("live", {}).items()},
            **{f"baseline_{k}": v for k, v in self.scores.get("baseline", {}).items()},
        }
        if self.live_generation is not None:
            values["live_generation"] = self.live_generation
        if self.warnings:
            values["warnings"] = list(self.warnings)
        if self.companions:
            values["companions"] = {
                c.generation: f"{c.decision}: {c.reason}" for c in self.companions
            }
        return values


class GenerationReviewer:
    """Reviews one product's generations (see the module docstring)."""

    def __init__(
        self,
        registry: GenerationRegistry,
        product: str,
        rule: CompletenessRule,
        scorer: GenerationScorer | None,
        no_live_hint: str,
        settings: GenerationsConfig,
        drop_tables: Callable[[str], None],
    ) -> None:
        self.registry = registry
        self.product = product
        self.rule = rule
        self.scorer = scorer
        self.no_live_hint = no_live_hint  # what to do before anything is live
        self.settings = settings  # generations: review policy and retention
        self.drop_tables = drop_tables  # drops a generation's tables, by its table name

    def live(self) -> LiveGeneration:
        """The live generation (what every reader uses), or NoLiveGenerationError."""
        live = self.registry.live(self.product)
        if live is None:
            raise NoLiveGenerationError(
                f"{self.product!r} has no live generation yet; {self.no_live_hint}"
            )
        return LiveGeneration(live.index_name, live)

    def review(
        self, record: GenerationRecord, embedder_for: EmbedderFor, force: bool = False
    ) -> GenerationReview:
        """Review the generation `record`: score it (and live) and promote it if the gate
        allows; the decision and scores are recorded on it. Unless `force` (or
        `generations.review: every_run`), a generation whose review inputs are unchanged
        since its last review keeps that review."""
        force = force or self.settings.review == "every_run"
        live = self.registry.live(self.product)
        completeness = self.rule.assess(record, live)
        if (
            not force
            and record.decision is not None
            and record.reviewed_key == self._key(record, live, completeness)
        ):
            return self._last_review(record)
        candidate = self._scores(record, embedder_for)
        against = live if live is not None and live.fingerprint != record.fingerprint else None
        live_scores = self._scores(against, embedder_for) if against is not None else None
        baseline = self._baseline(embedder_for) if candidate is not None else None
        warnings: tuple[str, ...] = ()
        if record.state == LIVE:
            decision, reason = "live", "this generation is live"
        else:
            verdict = gate(
                completeness.complete,
                candidate,
                live_scores,
                self.scorer.tolerance if self.scorer else 0.0,
                self.scorer.floors if self.scorer else {},
                incomplete=completeness.reason,
                baseline=baseline,
            )
            if verdict.allowed:
                self.registry.promote(
                    self.product, record.fingerprint, verdict.reason, PIPELINE, already_live_ok=True
                )
            decision = "promoted" if verdict.allowed else "refused"
            reason, warnings = verdict.reason, verdict.warnings
        scores = {"candidate": candidate} if candidate is not None else {}
        if live_scores is not None:
            scores["live"] = live_scores
        if baseline is not None:
            scores["baseline"] = baseline.scores
        stored = self._stored(self.registry.get(self.product, record.fingerprint) or record)
        # A land that finished during this review (another shard's, another day's) may have
        # made the generation complete since it was read: then this review's verdict is stale
        # and writes nothing, neither undoing that nor keeping a key the next review would
        # trust; the next review decides on the new state.
        written = self.registry.update(
            self.product,
            record.fingerprint,
            unless_changed={"complete": bool(record.complete)},
            complete=completeness.complete,
            decision=f"{decision}: {reason}",
            scores=json.dumps({**stored, **scores}, default=str),
        )
        assessed, record = record, self.registry.get(self.product, record.fingerprint)
        live = self.registry.live(self.product)
        if written:
            # the key of the record this verdict was made on, not of the record now: a land
            # that changed what completeness reads (rows, documents, a full pass) and not the
            # `complete` the guard compares leaves a key the next review does not trust
            key = self._key(assessed, live, self.rule.assess(assessed, live))
            self.registry.update(self.product, record.fingerprint, reviewed_key=key)
        else:
            reason += (
                " (a concurrent land changed the generation meanwhile; the next review decides)"
            )
        return GenerationReview.of(record, live, decision, reason, scores, warnings)

    def drop_retired(self, now: datetime | None = None) -> list[str]:
        """Drop the tables of the product's generations retired longer than
        `generations.retention_days` ago (nightly), each recorded in the audit log. Returns
        the dropped generations' tables."""
        retention = timedelta(days=self.settings.retention_days)
        cutoff = ((now or datetime.now(UTC)) - retention).timestamp()
        dropped = []
        for generation in self.registry.list_all(self.product):
            if generation.state != RETIRED or (generation.retired_at or 0) >= cutoff:
                continue
            self.drop_tables(generation.index_name)
            self.registry.update(self.product, generation.fingerprint, state=DROPPED)
            self.registry.record(
                "drop",
                self.product,
                from_index=generation.index_name,
                details={"retired_at": generation.retired_at},
                actor=NIGHTLY,
            )
            dropped.append(generation.index_name)
        return dropped

    def _key(
        self, record: GenerationRecord, live: GenerationRecord | None, completeness: Completeness
    ) -> str:
        """What a review of `record` depends on: its completeness, the live generation, and
        what both generations' scores depend on."""
        scorer = self.scorer
        return json.dumps(
            {
                "completeness": completeness.key,
                "live": live.index_name if live is not None else None,
                "scores": scorer.key(record) if scorer else None,
                "live_scores": scorer.key(live) if scorer and live is not None else None,
            },
            sort_keys=True,
            default=str,
        )

    @staticmethod
    def _stored(record: GenerationRecord) -> dict:
        return json.loads(record.scores or "{}")

    def _scores(
        self, record: GenerationRecord, embedder_for: EmbedderFor
    ) -> dict[str, float] | None:
        """A generation's own scores (None without a labelled set), kept on its record with
        what they depend on, and reused while that is unchanged."""
        key = self.scorer.key(record) if self.scorer else None
        if key is None:
            return None
        stored = self._stored(record)
        if stored.get("scored") == key and "own" in stored:
            return stored["own"]
        own = self.scorer.score(record, embedder_for)
        latest = self._stored(self.registry.get(self.product, record.fingerprint) or record)
        self.registry.update(
            self.product,
            record.fingerprint,
            scores=json.dumps({**latest, "own": own, "scored": key}, default=str),
        )
        return own

    def _baseline(self, embedder_for: EmbedderFor) -> Baseline | None:
        """What the candidate must beat, where its scorer says (`BaselineScorer`)."""
        baseline = getattr(self.scorer, "baseline", None)
        return baseline(embedder_for) if baseline is not None else None

    def _last_review(self, record: GenerationRecord) -> GenerationReview:
        """The review recorded on the generation, unchanged (`evaluated` False)."""
        decision, _, reason = (record.decision or "").partition(": ")
        stored = self._stored(record)
        scores = {k: stored[k] for k in ("candidate", "live", "baseline") if k in stored}
        return GenerationReview.of(
            record,
            self.registry.live(self.product),
            decision,
            f"{reason} (unchanged since the last review)",
            scores,
            evaluated=False,
        )


class ReviewedGenerations:
    """A product's generations, reviewed by the one reviewer: a product's engine inherits
    its registry, its generation's record, `review` and `live`, and says only what is its
    own: `completeness_rule`, `scorer` (None without a labelled set), `no_live_hint` (what to
    do before anything is live), `generation_config` (what its fingerprint hashes, and so
    its generation's table, `index`) and, for a generation with more than its table,
    `drop_tables`. The reviewer is built here, once, for every product alike.

    The engine has `name`, `tracking`, `store` and `config` (whose
    `generations` section is the review policy and retention)."""

    no_live_hint = "run it first"

    def completeness_rule(self) -> CompletenessRule:
        raise NotImplementedError

    def scorer(self) -> GenerationScorer | None:
        return None

    def generation_config(self) -> dict:
        raise NotImplementedError

    def generations_settings(self) -> GenerationsConfig:
        return self.config.generations

    def drop_tables(self, index: str) -> None:
        """A generation's tables, by its table name: its own."""
        self.store.drop_table(index)

    @cached_property
    def fingerprint(self) -> str:
        """The generation key: the hash of `generation_config` (a product whose key is
        made otherwise, the index's or the tickets', overrides it)."""
        return fingerprint_of(self.generation_config())

    @property
    def index(self) -> str:
        """The generation's table and tracking key: the product's name and fingerprint."""
        return generation_index(self.name, self.fingerprint)

    @cached_property
    def registry(self) -> GenerationRegistry:
        return GenerationRegistry(self.tracking)

    def record(self) -> GenerationRecord:
        """This configuration's generation record (registered on first use)."""
        return self.registry.ensure(
            self.name, self.fingerprint, self.index, self.generation_config()
        )

    @cached_property
    def reviewer(self) -> GenerationReviewer:
        return GenerationReviewer(
            self.registry,
            self.name,
            self.completeness_rule(),
            self.scorer(),
            self.no_live_hint,
            self.generations_settings(),
            self.drop_tables,
        )

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        """Score this generation (and live) on the labelled set and promote it if the gate
        allows (`GenerationReviewer.review`: `force` or `generations.review: every_run`
        re-evaluates a review whose inputs are unchanged)."""
        return self.reviewer.review(self.record(), embedder_for, force)

    def live(self) -> LiveGeneration:
        """The live generation (what every reader uses), or NoLiveGenerationError."""
        return self.reviewer.live()
