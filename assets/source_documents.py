"""Stage 1: the collection's documents, each classified against what has landed."""

import dagster as dg
from dagster_aws.s3 import S3Resource
from pydantic import Field

from assets.namespace import SAMPLE, Namespace, pipeline_of
from assets.partitions import GROUP_NAME, TRANSIENT_RETRY, retried_if_transient
from assets.stage_io import STAGE_CHARTS, as_metadata, parquet_metadata
from batch_pipeline.config import redacted
from batch_pipeline.index.kind import index_partition
from batch_pipeline.stages import COLLECT


class CollectConfig(dg.Config):
    """Empty for a full pass over the source; the publish sensor names doc ids instead."""

    changed_doc_ids: list[str] = Field(
        default_factory=list, description="Read only these documents (a targeted run)."
    )
    deleted_doc_ids: list[str] = Field(
        default_factory=list, description="Documents deleted at the source (a targeted run)."
    )

    def targeted_ids(self) -> list[str] | None:
        ids = self.changed_doc_ids + self.deleted_doc_ids
        return ids or None


def build_source_documents(
    partitions: dg.PartitionsDefinition, namespace: Namespace = SAMPLE
) -> dg.AssetsDefinition:
    @dg.asset(
        name=COLLECT.asset,
        key_prefix=list(namespace.prefix),
        partitions_def=partitions,
        group_name=GROUP_NAME,
        retry_policy=TRANSIENT_RETRY,
        kinds=set(COLLECT.kinds),
        required_resource_keys=namespace.resource_keys(["pipeline", "s3"]),
    )
    @retried_if_transient
    def source_documents(
        context: dg.AssetExecutionContext, config: CollectConfig
    ) -> dg.MaterializeResult:
        """Every document of the collection with its content hash, source version and title,
        classified as new, changed, unchanged, deleted or failed (with the reason). A targeted
        run (from the publish sensor) looks only at the documents it names."""
        s3: S3Resource = context.resources.original_resource_dict["s3"]  # not its client
        engine = index_partition(pipeline_of(context).product_env(s3), context.partition_key)
        output = engine.collect(context.run.run_id, config.targeted_ids())
        summary = output.summary
        for failure in summary.failures:
            context.log.warning(f"{failure.doc_id}: {failure.reason}: {failure.message}")
        return dg.MaterializeResult(
            metadata=as_metadata(
                {
                    **parquet_metadata(output.path),
                    **summary.metadata(),
                    "source": engine.source.describe(),
                    "collection_config": dg.MetadataValue.json(redacted(engine.collection)),
                    "mode": "targeted" if config.targeted_ids() else "full",
                    "targeted_doc_ids": len(config.targeted_ids() or []),
                    "bytes_read": summary.bytes_read,
                    "model": engine.model.name,
                    "model_fingerprint": engine.fingerprint,
                },
                STAGE_CHARTS[COLLECT.name],
            )
        )

    return source_documents
