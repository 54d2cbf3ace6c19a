"""The vector index, declared: one product per configured collection, named after it
(`IndexProduct`), built by its `IndexPartition`s on the embedding executor, complete after a
full pass of every shard, scored by retrieval on the collection's evaluation set."""

from typing import ClassVar

from batch_pipeline.config import CollectionConfig, PipelineConfig
from batch_pipeline.declaration import (
    Lines,
    ProductEnv,
    ProductFace,
    ProductKind,
    ProductTarget,
    RunReport,
)
from batch_pipeline.index import NAME, report
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import IndexProduct, open_partition
from batch_pipeline.index.review import FullPassRule, RetrievalScorer


class VectorIndex(ProductFace):
    """A collection's vector index, as a product (its product object: the whole collection, every
    shard)."""

    report_kind: ClassVar[str] = report.REPORT_KIND
    status_lines: ClassVar[Lines] = staticmethod(report.status_lines)
    health_line = staticmethod(report.health_line)
    product: IndexProduct

    def run_json(self, run: RunReport) -> dict[str, object]:
        return report.run_json(run)

    def run_lines(self, run: RunReport) -> list[str]:
        return report.run_lines(run)

    def run_groups(self) -> list[list[str]]:
        """The collection's own key and, when sharded, each shard's, one group each."""
        collection = self.product.collection
        keys = [self.name] + (collection.partition_keys() if collection.shards > 1 else [])
        return [[key] for key in keys]

    def status(self) -> dict[str, object]:
        return report.collection_status(self.product)

    def health(self) -> dict[str, object]:
        return report.collection_health(self.product)


def targets(config: PipelineConfig) -> list[ProductTarget]:
    """Every configured collection's index."""
    return [ProductTarget(c.name, NAME, c.name) for c in config.collections]


def index_partition(env: ProductEnv, key: str) -> IndexPartition:
    """The vector index of one collection partition (the collection, or one of its shards):
    what reads a collection's documents for every product over them (`documents_for`)."""
    return open_partition(
        env.config, env.storage, key, env.tracking, env.store, env.s3_client, env.execution
    )


def open_index(env: ProductEnv, target: ProductTarget) -> VectorIndex:
    product = IndexProduct(
        env.config,
        env.storage,
        target.name,
        env.tracking,
        env.store,
        env.s3_client,
        env.execution,
    )
    return VectorIndex(product)


INDEX = ProductKind(
    name=NAME,
    package="batch_pipeline.index",
    family="embed",
    section=CollectionConfig,
    targets=targets,
    open=open_index,
    partition=IndexPartition,
    rule=FullPassRule,
    scorer=RetrievalScorer,
    report="batch_pipeline.index.report",
    definitions="batch_pipeline.definitions.vector_index:index_definitions",
    configured_at="collections",
    collection_runs=True,
    commands="batch_pipeline.cli.index",
)
