"""Document sources: a folder today; S3 and SQL tables share the same interface."""

from batch_pipeline.config import FilesystemSourceConfig
from batch_pipeline.sources.base import (
    DocumentReadError,
    DocumentSource,
    SourceEntry,
    SourceUnavailableError,
)
from batch_pipeline.sources.filesystem import FilesystemSource

__all__ = [
    "DocumentReadError",
    "DocumentSource",
    "SourceEntry",
    "SourceUnavailableError",
    "make_source",
]


def make_source(config: FilesystemSourceConfig) -> DocumentSource:
    """The engine's source for one collection's `source:` configuration."""
    if isinstance(config, FilesystemSourceConfig):
        return FilesystemSource(config.path, config.glob)
    raise TypeError(f"unsupported source kind {config.kind!r}")
