"""A collection's vector index generation for one configuration: tracked after each land,
reviewed through the shared `GenerationReviewer` (retrieval scores, "had a full pass"),
promoted, read through the live pointer, and (by the reviewer's retention) dropped after
retirement with its question rows.

`GenerationLifecycle` holds this logic for the pipeline, the Dagster assets and the CLI alike.
"""

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from batch_pipeline.config import (
    CollectionConfig,
    EvaluationConfig,
    GenerationsConfig,
    ModelConfig,
)
from batch_pipeline.generations.evaluation import (
    eval_set_version,
    index_model,
    load_eval_set,
    score_generation,
)
from batch_pipeline.generations.registry import (
    BUILDING,
    CANDIDATE,
    generation_complete,
)
from batch_pipeline.generations.review import (
    PIPELINE,
    Completeness,
    EmbedderFor,
    ReviewedGenerations,
)
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.names import generation_index
from batch_pipeline.state.retrieval import DEFAULT_PARAMS, VECTOR, VectorParams
from batch_pipeline.state.tracking import UNLISTABLE, GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore


def table_version(store: VectorStore, index: str) -> int | None:
    table = store.open(index)
    return table.version if table is not None else None


@dataclass(frozen=True)
class FullPassRule:
    """Complete once every shard had a full pass and nothing is pending (`track` records it
    after each land)."""

    store: VectorStore

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        key = {
            "complete": bool(record.complete),
            "documents": record.documents,
            "version": table_version(self.store, record.index_name),
        }
        return Completeness(bool(record.complete), None, key)


@dataclass(frozen=True)
class RetrievalScorer:
    """Recall@k and MRR@k on the collection's evaluation set (queries with their relevant
    documents), searched in each generation's own table with its own model, in the
    collection's search mode: the gate measures what readers get."""

    store: VectorStore
    evaluation: EvaluationConfig
    floors: dict[str, float] = field(default_factory=dict)
    mode: str = VECTOR  # ranked as the collection's search ranks (`index.search`)
    params: VectorParams = DEFAULT_PARAMS  # and its ANN index searched as search does

    @property
    def tolerance(self) -> float:
        return self.evaluation.tolerance

    def key(self, record: GenerationRecord) -> dict[str, object]:
        return {
            "eval_set": eval_set_version(self.evaluation.path),
            "k": self.evaluation.k,
            "version": table_version(self.store, record.index_name),
            "mode": self.mode,
            "params": [self.params.nprobes, self.params.refine_factor],
        }

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        model = index_model(record)
        return score_generation(
            self.store,
            record.index_name,
            embedder_for(model),
            load_eval_set(self.evaluation.path),
            self.evaluation.k,
            model.query_prefix,
            mode=self.mode,
            params=self.params,
        )


class GenerationLifecycle(ReviewedGenerations):
    """The generation a collection's current configuration builds (one model fingerprint)."""

    def __init__(
        self,
        collection: CollectionConfig,
        settings: GenerationsConfig,
        model_config: ModelConfig,
        model: ResolvedModel,
        fingerprint: str,
        tracking: TrackingStore,
        store: VectorStore,
        feed_tables: Callable[[str], list[str]] = lambda index: [],
    ) -> None:
        self.feed_tables = feed_tables  # other products' tables beside a generation
        self.collection = collection
        self.model_config = model_config
        self.model = model
        self.fingerprint = fingerprint
        self.index = generation_index(collection.name, fingerprint)
        self.tracking = tracking
        self.store = store
        self.settings = settings  # generations: review policy and retention

    @property
    def name(self) -> str:
        return self.collection.name

    # its generations: the frame's reviewer, with its rule and scorer
    no_live_hint = "materialise it first (make demo)"

    def completeness_rule(self) -> FullPassRule:
        """Every shard had a full pass, and nothing is pending."""
        return FullPassRule(self.store)

    def scorer(self) -> RetrievalScorer | None:
        """Recall@k and MRR@k on the collection's evaluation set, where it has one."""
        evaluation = self.collection.evaluation
        if evaluation is None:
            return None
        index = self.collection.index
        return RetrievalScorer(
            self.store, evaluation, mode=index.search, params=VectorParams.of(index.vector)
        )

    def generation_config(self) -> dict:
        return self.model_config.model_dump(mode="json")

    def generations_settings(self) -> GenerationsConfig:
        return self.settings

    def track(self, full_pass_partitions: Iterable[str] = ()) -> None:
        """After a land (under the landing lease): count rows and documents, note the
        partitions that had a full pass, move `building` to `candidate` once complete (no
        change pending, no folder left unlisted), and promote the collection's first
        complete generation."""
        record = self.record()
        passes = record.passed_partitions() | set(full_pass_partitions)
        full = passes >= set(self.collection.partition_keys())  # every shard had a full pass
        # a folder that could not be listed may hold documents this generation lacks
        unlisted = self.tracking.failure_count(self.index, frozenset({UNLISTABLE}))
        pending = self.tracking.freshness(self.index)["pending"]
        complete = generation_complete(full, pending) and not unlisted
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
                actor=PIPELINE,
                already_live_ok=True,
            )

    def drop_tables(self, index: str) -> None:
        """A generation's table and the tables other products' feeds keep beside it."""
        self.store.drop_table(index)
        for table in self.feed_tables(index):
            self.store.drop_table(table)
