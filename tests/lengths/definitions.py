"""The lengths product's Dagster definitions: its stage assets from the one builder, on the
collections' partitions (collect is each collection's own `source_documents`)."""

import dagster as dg

from assets.partitions import collection_partitions
from assets.product_stages import build_product_assets
from batch_pipeline.config import PipelineConfig
from tests.lengths.kind import LENGTHS
from tests.lengths.partition import LENGTH_STAGES


def length_definitions(config: PipelineConfig) -> dg.Definitions:
    assets = build_product_assets(
        LENGTHS, LENGTH_STAGES, collection_partitions(config), group_name="document_lengths"
    )
    return dg.Definitions(assets=assets)
