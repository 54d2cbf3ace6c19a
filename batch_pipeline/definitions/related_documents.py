"""Related documents' Dagster definitions: their stages on the collections' partitions, after
each partition's index has landed. Their runs are the collections' job's (the publish sensors'
and the nightly reconciliation's): the kind declares that it rides them
(`ProductKind.collection_runs`)."""

import dagster as dg

from assets.namespace import Namespace
from assets.partitions import collection_partitions
from assets.product_stages import build_product_assets
from assets.related_documents import RELATED_ASSETS
from batch_pipeline.config import PipelineConfig


def related_definitions(config: PipelineConfig, namespace: Namespace) -> dg.Definitions:
    """The related documents of every collection with `related:`, their keys in
    `namespace`."""
    partitions = collection_partitions(config)
    return dg.Definitions(assets=build_product_assets(RELATED_ASSETS, partitions, namespace))
