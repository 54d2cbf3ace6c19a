"""Stage 2: normalised, chunked text with the exact model input of every chunk."""

import dagster as dg

from assets.partitions import GROUP_NAME, OWNERS, PROGRESS_INTERVAL_SECONDS, progress_log
from assets.stage_io import STAGE_CHARTS, as_metadata, parquet_metadata, upstream_path
from batch_pipeline.stages import COLLECT, PREPARE
from resources.pipeline import PipelineResource


def build_document_chunks(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name=PREPARE.asset,
        deps=[COLLECT.asset],
        partitions_def=partitions,
        group_name=GROUP_NAME,
        owners=OWNERS,
        kinds=set(PREPARE.kinds),
    )
    def document_chunks(
        context: dg.AssetExecutionContext, pipeline: PipelineResource
    ) -> dg.MaterializeResult:
        """Chunks of new and changed documents, cut with the model's tokenizer along headings
        and paragraphs, each with its stable id, exact model input and staleness flag."""
        engine = pipeline.partition(context.partition_key)
        collected = upstream_path(context, COLLECT, engine.staging)
        output = engine.prepare(
            context.run.run_id, collected, progress_log(context), PROGRESS_INTERVAL_SECONDS
        )
        for failure in output.summary.failures:
            context.log.warning(f"{failure.doc_id}: {failure.reason}: {failure.message}")
        settings = engine.chunk_settings()
        return dg.MaterializeResult(
            metadata=as_metadata(
                {
                    **parquet_metadata(output.path),
                    **output.summary.metadata(),
                    "max_tokens": settings.max_tokens,
                    "overlap_tokens": settings.overlap_tokens,
                    "model_fingerprint": engine.fingerprint,
                },
                STAGE_CHARTS[PREPARE.name],
            )
        )

    return document_chunks
