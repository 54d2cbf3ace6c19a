"""A collection's vector index, the product: what every partition of the collection (the
collection, or one of its shards) shares. The configuration, the model and the embedding
executor, the generation the configuration builds (its fingerprint and LanceDB table), the
tables other products' feeds keep beside it, the table's ANN and full-text indexes, and the
generations' record, review, live pointer and retention (`ReviewedGenerations`, with the
rule and scorer of `index.review`). `IndexPartition` (`index.partition`) runs the stages of
one partition of it.
"""

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from functools import cached_property

from batch_pipeline.config import CollectionConfig, ConfigError, GenerationsConfig, PipelineConfig
from batch_pipeline.declaration import feed_tables
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.embedding import EmbeddingExecutor, embedding_executor
from batch_pipeline.generations.evaluation import index_model
from batch_pipeline.generations.registry import BUILDING, CANDIDATE, generation_complete
from batch_pipeline.generations.review import (
    PIPELINE,
    EmbedderFor,
    GenerationReview,
    ReviewedGenerations,
)
from batch_pipeline.index import NAME
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.reranker import RerankerGenerations
from batch_pipeline.index.review import FullPassRule, RetrievalScorer
from batch_pipeline.inference.fingerprint import model_fingerprint
from batch_pipeline.inference.models import ResolvedModel, resolve_model
from batch_pipeline.names import generation_index
from batch_pipeline.sources import DocumentSource, S3ClientFactory, make_source
from batch_pipeline.state.retrieval import VectorParams
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.table_indexes import IndexHealth, IndexUpkeep, TableIndexes
from batch_pipeline.state.tracking import UNLISTABLE, GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore


def configured_generations(config: PipelineConfig) -> dict[str, str]:
    """Each collection's generation under this configuration: the table it builds now."""
    model = resolve_model(config.model)
    return {
        c.name: generation_index(c.name, model_fingerprint(model, c.chunking))
        for c in config.collections
    }


class IndexProduct(ReviewedGenerations):
    """A collection's vector index (see the module docstring)."""

    no_live_hint = (
        "materialise it first (its partition of embedding_job, or batch-pipeline run "
        "--collection NAME)"
    )

    def __init__(
        self,
        config: PipelineConfig,
        storage: StorageLocations,
        collection: str,
        tracking: TrackingStore | None = None,
        store: VectorStore | None = None,
        s3_client: S3ClientFactory | None = None,
        execution: ExecutorChoice | None = None,
    ) -> None:
        self.collection: CollectionConfig = config.configured(collection)
        self.config = config
        self.storage = storage
        self.tracking = tracking or TrackingStore(storage.tracking_url)
        self.store = store or VectorStore(storage.lancedb_uri, storage.storage_options)
        self.staging = storage.staging()
        self.s3_client = s3_client
        self.execution = execution or ExecutorChoice()  # which executor embeds, and on what

    @property
    def name(self) -> str:
        return self.collection.name

    def partition(self, key: str) -> IndexPartition:
        """One of the collection's partitions: itself, or one of its shards."""
        return IndexPartition(self, key)

    @cached_property
    def model(self) -> ResolvedModel:
        return resolve_model(self.config.model)

    @property
    def executor(self) -> EmbeddingExecutor:
        return embedding_executor(self.model, self.execution)

    @cached_property
    def fingerprint(self) -> str:
        """The model, the chunking, and a provider's own model where the executor embeds
        with one: a change of any starts a new generation beside the live one."""
        return model_fingerprint(self.model, self.collection.chunking, self.executor.served_model)

    def feed_tables(self, index: str, written: bool = False) -> list[str]:
        """The tables other products' declared feeds keep beside the generation `index` (the
        briefs' question rows): all of them, or those the configuration now writes
        (`declaration.feed_tables`)."""
        return feed_tables(self.config, NAME, self.name, index, written)

    def search_tables(self, index: str) -> list:
        """The tables a search of the generation `index` reads: its own, and those other
        products' feeds write beside it (the briefs' question rows); none if it is missing."""
        table = self.store.open(index)
        if table is None:
            return []
        feeds = (self.store.open(name) for name in self.feed_tables(index, written=True))
        return [table, *(feed for feed in feeds if feed is not None)]

    @property
    def vector_params(self) -> VectorParams:
        """How search reads the ANN index (`index.vector`)."""
        return VectorParams.of(self.collection.index.vector)

    @cached_property
    def reranking(self) -> RerankerGenerations | None:
        """The collection's reranker generations (`reranker:`), or None without one."""
        reranker = self.collection.reranker
        return RerankerGenerations(self, reranker) if reranker is not None else None

    @cached_property
    def collection_source(self) -> DocumentSource:
        """The whole collection's source (what the publish sensor watches)."""
        return make_source(self.collection.source, self.s3_client)

    # ------------------------------------------------------------- the table's indexes

    def indexes(self, index: str | None = None) -> TableIndexes | None:
        """The ANN and full-text indexes of a table of this collection (the generation's
        own by default), under its `index:` settings (`state.table_indexes`); None before
        the table has landed."""
        name = index or self.index
        table = self.store.open(name)
        if table is None:
            return None
        retention = timedelta(hours=self.config.maintenance.version_retention_hours)
        return TableIndexes(table, name, self.collection.index, self.tracking, retention)

    def index_health(
        self, upkeep: IndexUpkeep | None = None, tables: tuple[str, ...] | None = None
    ) -> IndexHealth:
        """The indexes of `tables` (the generation's table and its feeds' tables beside it
        unless given), with what `upkeep` (a land's, of the generation's table) failed to
        build."""
        states = {}
        for name in tables or (self.index, *self.feed_tables(self.index)):
            indexes = self.indexes(name)
            if indexes is not None:
                states[name] = indexes.states()
        return IndexHealth(states, dict(upkeep.failed) if upkeep is not None else {})

    def nightly_maintenance(self, version_retention: timedelta, owner: str) -> dict[str, int]:
        """Compact the table and clean up versions older than `version_retention`. (Retired
        generations past retention are dropped by the nightly review, as every product's
        are: `declaration.review_after_run`.)"""
        with self.tracking.landing_lease(self.index, owner=owner):
            return self.store.maintain(self.index, version_retention)

    # ------------------------------------------------------------------ generations

    def completeness_rule(self) -> FullPassRule:
        """Every shard had a full pass, and nothing is pending."""
        return FullPassRule(self.store)

    def scorer(self) -> RetrievalScorer | None:
        """Recall@k and MRR@k on the collection's evaluation set, where it has one."""
        evaluation = self.collection.evaluation
        if evaluation is None:
            return None
        index = self.collection.index
        return RetrievalScorer(self.store, evaluation, mode=index.search, params=self.vector_params)

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        """The index generation's review, then the reranker's over the (new) live index
        generation, reported with it (`index.reranker`)."""
        review = super().review(embedder_for, force)
        if self.reranking is None or self.registry.live(self.name) is None:
            return review
        return replace(review, companions=(self.reranking.review(embedder_for, force),))

    def generation_config(self) -> dict:
        return self.config.model.model_dump(mode="json")

    def generations_settings(self) -> GenerationsConfig:
        return self.config.generations

    @staticmethod
    def model_for(record: GenerationRecord) -> ResolvedModel:
        """The model a generation was built with."""
        return index_model(record)

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


def open_partition(
    config: PipelineConfig,
    storage: StorageLocations,
    key: str,
    tracking: TrackingStore | None = None,
    store: VectorStore | None = None,
    s3_client: S3ClientFactory | None = None,
    execution: ExecutorChoice | None = None,
) -> IndexPartition:
    """The index of one collection partition, `key` (a collection, or one of its shards),
    its product opened over the collection the key names; a ConfigError naming the
    configured partitions when none is called so."""
    try:
        collection, _ = config.locate(key)
    except KeyError as error:
        raise ConfigError(str(error.args[0])) from None
    product = IndexProduct(config, storage, collection.name, tracking, store, s3_client, execution)
    return product.partition(key)
