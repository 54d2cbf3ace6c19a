"""The five stage assets (collect -> prepare -> plan -> execute -> land), then the generation."""

import dagster as dg

from assets.document_chunks import build_document_chunks
from assets.embedding_stages import build_embedding_stages
from assets.index_generation import build_index_generation
from assets.partitions import GROUP_NAME, OWNERS
from assets.source_documents import build_source_documents
from assets.vector_index import build_vector_index
from batch_pipeline.stages import STAGES
from batch_pipeline.stages.columns import COLUMN_DESCRIPTIONS


def build_stage_assets(partitions: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    plan_and_execute = build_embedding_stages(
        STAGES,
        partitions,
        lambda pipeline, key: pipeline.partition(key),
        COLUMN_DESCRIPTIONS,
        "Every stale model input exactly once (duplicates folded), sorted by token length and "
        "packed into batches sized against the device's token/memory budget.",
        "One vector per planned input, computed batch by batch on the best device present "
        "(CUDA, then MPS, then CPU), in the plan's order; on CPU by torch or OpenVINO, in fp32 "
        "or bf16, whichever measured fastest within the fidelity bar (see the metadata).",
        group_name=GROUP_NAME,
        owners=OWNERS,
    )
    return [
        build_source_documents(partitions),
        build_document_chunks(partitions),
        *plan_and_execute,
        build_vector_index(partitions),
        build_index_generation(partitions),
    ]
