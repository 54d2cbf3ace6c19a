"""Document sources: a folder, an S3 bucket or a SQL table, behind one interface."""

from collections.abc import Callable

from batch_pipeline.config import FilesystemSourceConfig, S3SourceConfig, SqlSourceConfig
from batch_pipeline.sources.base import (
    ChangeSet,
    DocumentReadError,
    DocumentSource,
    PartitionFilter,
    RawDocument,
    SourceEntry,
    SourceUnavailableError,
)
from batch_pipeline.sources.filesystem import FilesystemSource

__all__ = [
    "ChangeSet",
    "DocumentReadError",
    "DocumentSource",
    "PartitionFilter",
    "RawDocument",
    "S3ClientFactory",
    "SourceEntry",
    "SourceUnavailableError",
    "make_source",
]

S3ClientFactory = Callable[[S3SourceConfig], object]


def default_s3_client(config: S3SourceConfig):  # noqa: ANN201
    """A boto3 client from the environment's credentials and the source's endpoint/region."""
    import boto3

    return boto3.client("s3", endpoint_url=config.endpoint_url, region_name=config.region)


def make_source(
    config: FilesystemSourceConfig | S3SourceConfig | SqlSourceConfig,
    s3_client: S3ClientFactory | None = None,
) -> DocumentSource:
    """The engine's source for one collection's `source:` configuration."""
    if isinstance(config, FilesystemSourceConfig):
        return FilesystemSource(config.path, config.glob)
    if isinstance(config, S3SourceConfig):
        from batch_pipeline.sources.s3 import S3Source

        client = (s3_client or default_s3_client)(config)
        return S3Source(client, config.bucket, config.prefix, config.glob)
    if isinstance(config, SqlSourceConfig):
        from batch_pipeline.sources.sql import SqlSource

        return SqlSource(
            config.resolved_url(),
            table=config.table,
            query=config.query,
            id_column=config.id_column,
            title_column=config.title_column,
            body_column=config.body_column,
            updated_at_column=config.updated_at_column,
            deleted_column=config.deleted_column,
            fmt=config.format,
        )
    raise TypeError(f"unsupported source kind {config.kind!r}")
