"""The vector index's Dagster definitions: the collection's collect, its four stages and its
generation review, on the collections' partitions. Its runs are the collections' job's (the
publish sensors' and the nightly reconciliation's): the index declares that it rides them
(`ProductKind.collection_runs`)."""

import dagster as dg

from assets.namespace import Namespace
from assets.partitions import collection_partitions
from assets.vector_index import build_index_assets
from batch_pipeline.config import PipelineConfig


def index_definitions(config: PipelineConfig, namespace: Namespace) -> dg.Definitions:
    """Every collection's vector index, on the collections' partitions, its keys in
    `namespace`."""
    return dg.Definitions(assets=build_index_assets(collection_partitions(config), namespace))
