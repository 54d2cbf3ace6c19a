"""The lengths product's Dagster definitions: its stage assets from the one builder, on the
collections' partitions (collect is each collection's own `source_documents`)."""

import dagster as dg

from assets.namespace import Namespace
from assets.partitions import collection_partitions
from assets.product_stages import ProductAssets, build_product_assets, open_declared
from batch_pipeline.config import PipelineConfig
from tests.lengths.kind import LENGTHS
from tests.lengths.partition import LENGTH_STAGES

LENGTH_ASSETS = ProductAssets(
    stages=LENGTH_STAGES, open=open_declared(LENGTHS), group_name="document_lengths"
)


def length_definitions(config: PipelineConfig, namespace: Namespace) -> dg.Definitions:
    partitions = collection_partitions(config)
    return dg.Definitions(assets=build_product_assets(LENGTH_ASSETS, partitions, namespace))
