"""The document sources a collection reads: a folder, S3 (with its SQS change feed), or a SQL
table or query."""

import os
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from batch_pipeline.config.base import (
    ConfigError,
    _existing_folder,
    _Strict,
)
from batch_pipeline.config.secrets import endpoint_without_credentials


class FilesystemSourceConfig(_Strict):
    """Documents read from a folder; the doc id is the path relative to that folder."""

    kind: Literal["filesystem"] = "filesystem"
    path: Path = Field(description="Folder holding the documents; relative to the config file.")
    glob: str = Field(default="**/*.md", description="Glob pattern, relative to `path`.")
    read_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A file not read within this (a hung network mount) is a transient "
        "failure, retried on the next run, and the run goes on.",
    )

    _resolve_path = field_validator("path")(_existing_folder)


class S3NotificationsConfig(_Strict):
    """An S3 change feed: the bucket's event notifications delivered to an SQS queue."""

    sqs_queue_url: str = Field(
        min_length=1, description="Queue receiving the bucket's ObjectCreated/ObjectRemoved events."
    )
    visibility_timeout_seconds: int = Field(
        default=600,
        ge=30,
        description="How long a received message stays hidden while its change waits to be "
        "launched; it is deleted once the run request carrying it is in the cursor.",
    )
    max_messages_per_tick: int = Field(
        default=1000, ge=10, description="Messages read per look at the source at most."
    )


class S3Location(_Strict):
    """Where an S3 bucket is served: an S3-compatible endpoint (without credentials, which
    come from the environment or the Dagster `S3Resource`, never from here) and a region.
    The collections' S3 source and the tickets' S3 export both build on it."""

    endpoint_url: str | None = Field(
        default=None, description="S3-compatible endpoint URL, without credentials."
    )
    region: str | None = Field(default=None, description="AWS region name.")

    @field_validator("endpoint_url")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        return endpoint_without_credentials(value)


class S3SourceConfig(S3Location):
    """Objects in an S3 bucket; the doc id is the object key, the version its ETag."""

    kind: Literal["s3"]
    bucket: str = Field(min_length=3, description="Bucket name.")
    prefix: str = Field(default="", description="Only keys under this prefix.")
    glob: str = Field(default="*", description="fnmatch pattern on the key below the prefix.")
    notifications: S3NotificationsConfig | None = Field(
        default=None,
        description="A change feed: sensor ticks read the queue instead of listing the "
        "bucket; the nightly reconciliation still lists it in full.",
    )


class _SqlConnection(_Strict):
    """A database to read from: `url`, or `url_env` naming the variable that holds it."""

    setting: ClassVar[str] = "source"  # where the section sits, for error messages
    url: str | None = Field(default=None, description="SQLAlchemy URL (no password: use url_env).")
    url_env: str | None = Field(
        default=None, description="Name of an environment variable holding the SQLAlchemy URL."
    )

    @model_validator(mode="after")
    def _one_url(self) -> "_SqlConnection":
        if (self.url is None) == (self.url_env is None):
            raise ValueError("set exactly one of url and url_env")
        return self

    def resolved_url(self) -> str:
        """The URL as written, or read from the environment variable `url_env`."""
        if self.url is not None:
            return self.url
        value = os.environ.get(self.url_env or "")
        if not value:
            raise ConfigError(
                f"{self.setting}.url_env: environment variable {self.url_env} is not set"
            )
        return value


class SqlSourceConfig(_SqlConnection):
    """Rows of a SQL table or query; the doc id is the id column, the version updated-at."""

    kind: Literal["sql"]
    table: str | None = Field(default=None, description="Table name (schema.table allowed).")
    query: str | None = Field(default=None, description="A SELECT used instead of a table.")
    id_column: str = "id"
    title_column: str | None = "title"
    body_column: str = "body"
    updated_at_column: str = "updated_at"
    deleted_column: str | None = Field(
        default=None, description="Boolean column; true rows count as deleted."
    )
    metadata_columns: list[str] = Field(
        default_factory=list,
        description="Columns carried to every row of the document as its metadata.",
    )
    format: Literal["markdown", "rst", "html", "text"] = Field(
        default="text", description="Markup of the body column."
    )

    @model_validator(mode="after")
    def _table_or_query(self) -> "SqlSourceConfig":
        if (self.table is None) == (self.query is None):
            raise ValueError("set exactly one of table and query")
        return self


SourceConfig = Annotated[
    FilesystemSourceConfig | S3SourceConfig | SqlSourceConfig, Field(discriminator="kind")
]
