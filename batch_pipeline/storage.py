"""Where the pipeline keeps its state: the LanceDB index, the tracking database, staging.

Everything defaults to folders under `BATCH_PIPELINE_HOME` (default `.batch_pipeline` in the
working directory). Each location can be overridden on its own by a URI or URL, so a LanceDB
URI such as `s3://bucket/index` or a PostgreSQL SQLAlchemy URL needs no code change.
"""

import os
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "BATCH_PIPELINE_HOME"
LANCEDB_URI_ENV = "BATCH_PIPELINE_LANCEDB_URI"
TRACKING_URL_ENV = "BATCH_PIPELINE_TRACKING_URL"
STAGING_DIR_ENV = "BATCH_PIPELINE_STAGING_DIR"
DEFAULT_HOME = ".batch_pipeline"


@dataclass(frozen=True)
class StorageLocations:
    """Resolved locations of the pipeline's state."""

    home: Path
    lancedb_uri: str
    tracking_url: str
    staging_dir: Path


def resolve_storage(
    home: str | None = None,
    lancedb_uri: str | None = None,
    tracking_url: str | None = None,
    staging_dir: str | None = None,
) -> StorageLocations:
    """Explicit arguments win, then the environment, then folders under the home."""
    home_path = Path(home or os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser().resolve()
    lance = lancedb_uri or os.environ.get(LANCEDB_URI_ENV) or str(home_path / "lancedb")
    tracking = (
        tracking_url or os.environ.get(TRACKING_URL_ENV) or f"sqlite:///{home_path / 'tracking.db'}"
    )
    staging = (
        Path(staging_dir or os.environ.get(STAGING_DIR_ENV) or home_path / "staging")
        .expanduser()
        .resolve()
    )
    return StorageLocations(home_path, lance, tracking, staging)
