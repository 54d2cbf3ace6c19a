"""The five stage assets (collect -> prepare -> plan -> execute -> land), then the generation."""

import dagster as dg

from assets.batch_plan import build_batch_plan
from assets.chunk_embeddings import build_chunk_embeddings
from assets.document_chunks import build_document_chunks
from assets.index_generation import build_index_generation
from assets.source_documents import build_source_documents
from assets.vector_index import build_vector_index


def build_stage_assets(partitions: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    return [
        build_source_documents(partitions),
        build_document_chunks(partitions),
        build_batch_plan(partitions),
        build_chunk_embeddings(partitions),
        build_vector_index(partitions),
        build_index_generation(partitions),
    ]
