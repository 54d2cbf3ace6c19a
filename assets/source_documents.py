"""Stage 1: the collection's documents, each classified against what has landed."""

import dagster as dg
from pydantic import Field

from assets.partitions import GROUP_NAME, OWNERS
from assets.stage_io import parquet_metadata
from resources.pipeline import PipelineResource


class CollectConfig(dg.Config):
    doc_ids: list[str] = Field(
        default_factory=list,
        description="Look only at these doc ids (a targeted run); empty means the whole source.",
    )


def build_source_documents(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name="source_documents",
        partitions_def=partitions,
        group_name=GROUP_NAME,
        owners=OWNERS,
        kinds={"python", "parquet"},
    )
    def source_documents(
        context: dg.AssetExecutionContext, config: CollectConfig, pipeline: PipelineResource
    ) -> dg.MaterializeResult:
        """Every document of the collection with its content hash, source version and title,
        classified as new, changed, unchanged, deleted or failed (with the reason)."""
        engine = pipeline.collection(context.partition_key)
        output = engine.collect(context.run.run_id, config.doc_ids or None)
        summary = output.summary
        for failure in summary.failures:
            context.log.warning(f"{failure.doc_id}: {failure.reason}: {failure.message}")
        return dg.MaterializeResult(
            metadata={
                **parquet_metadata(output.path),
                **summary.metadata(),
                "source": engine.source.describe(),
                "targeted_doc_ids": len(config.doc_ids),
                "bytes_read": summary.bytes_read,
                "model": engine.model.name,
                "model_fingerprint": engine.fingerprint,
            }
        )

    return source_documents
