"""Document sources: a folder, an S3 bucket or a SQL table, behind one interface."""

import os
from collections.abc import Callable

from batch_pipeline.config import FilesystemSourceConfig, S3SourceConfig, SqlSourceConfig
from batch_pipeline.config.sources import S3Location
from batch_pipeline.sources.base import (
    ChangeSet,
    DocumentReadError,
    DocumentSource,
    ListingGap,
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
    "ListingGap",
    "PartitionFilter",
    "RawDocument",
    "S3_ENV",
    "S3ClientFactory",
    "SourceEntry",
    "SourceUnavailableError",
    "make_source",
]

# a bucket's location (a collection's S3 source, the tickets' S3 export) -> an S3 client
S3ClientFactory = Callable[[S3Location], object]


# The environment both the code location and the CLI read for S3 (credentials come from the
# usual AWS variables or profiles): S3 client argument -> environment variable.
S3_ENV = {
    "endpoint_url": "BATCH_PIPELINE_S3_ENDPOINT_URL",
    "region_name": "AWS_DEFAULT_REGION",
    "profile_name": "AWS_PROFILE",
}


def s3_environment() -> dict[str, str]:
    """The S3 settings set in the environment, by client argument (unset ones left out)."""
    return {arg: os.environ[env] for arg, env in S3_ENV.items() if os.environ.get(env)}


def aws_client(service: str, config: S3Location):  # noqa: ANN201
    """A boto3 client ("s3", or "sqs" for a change feed) as the code location builds one: the
    environment's settings (S3_ENV), overridden by the source's own `endpoint_url` and
    `region`."""
    import boto3

    settings = s3_environment()
    profile = settings.pop("profile_name", None)
    if config.endpoint_url:
        settings["endpoint_url"] = config.endpoint_url
    if config.region:
        settings["region_name"] = config.region
    return boto3.session.Session(profile_name=profile).client(service, **settings)


def default_s3_client(config: S3Location):  # noqa: ANN201
    return aws_client("s3", config)


def make_source(
    config: FilesystemSourceConfig | S3SourceConfig | SqlSourceConfig,
    s3_client: S3ClientFactory | None = None,
) -> DocumentSource:
    """The engine's source for one collection's `source:` configuration."""
    if isinstance(config, FilesystemSourceConfig):
        return FilesystemSource(config.path, config.glob, config.read_timeout_seconds)
    if isinstance(config, S3SourceConfig):
        from batch_pipeline.sources.s3 import S3Source

        client = (s3_client or default_s3_client)(config)
        feed = None
        if config.notifications is not None:
            from batch_pipeline.sources.s3_feed import SqsFeed

            feed = SqsFeed(
                aws_client("sqs", config),
                config.notifications.sqs_queue_url,
                config.notifications.visibility_timeout_seconds,
                config.notifications.max_messages_per_tick,
            )
        return S3Source(client, config.bucket, config.prefix, config.glob, feed)
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
            metadata_columns=config.metadata_columns,
        )
    raise TypeError(f"unsupported source kind {config.kind!r}")
