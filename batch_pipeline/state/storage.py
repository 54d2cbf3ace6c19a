"""Where the pipeline keeps its state: the LanceDB index, the tracking database, staging.

Everything defaults to folders under `BATCH_PIPELINE_HOME` (default `.batch_pipeline` in the
working directory). Each location can be overridden on its own by a URI or URL, so a LanceDB
URI such as `s3://bucket/index`, an `s3://bucket/staging` prefix or a PostgreSQL SQLAlchemy URL
needs no code change. Object-store credentials and endpoints are LanceDB storage options, given
as a JSON object in `BATCH_PIPELINE_STORAGE_OPTIONS`; staging on S3 uses the same options.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from batch_pipeline.config import ConfigError
from batch_pipeline.state.staging import StagingArea

HOME_ENV = "BATCH_PIPELINE_HOME"
LANCEDB_URI_ENV = "BATCH_PIPELINE_LANCEDB_URI"
TRACKING_URL_ENV = "BATCH_PIPELINE_TRACKING_URL"
STAGING_DIR_ENV = "BATCH_PIPELINE_STAGING_DIR"
STORAGE_OPTIONS_ENV = "BATCH_PIPELINE_STORAGE_OPTIONS"
DEFAULT_HOME = ".batch_pipeline"


@dataclass(frozen=True)
class StorageLocations:
    """Resolved locations of the pipeline's state."""

    home: Path
    lancedb_uri: str
    tracking_url: str
    staging_dir: str  # a local folder or an object store prefix such as s3://bucket/staging
    # object-store options for LanceDB and staging; they hold secrets, so never shown
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)

    def staging(self) -> StagingArea:
        return StagingArea(self.staging_dir, self.storage_options)


def parse_storage_options(text: str | None, source: str = STORAGE_OPTIONS_ENV) -> dict[str, str]:
    """A JSON object of string options, or a ConfigError that names where it came from."""
    if not text:
        return {}
    try:
        options = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{source}: not valid JSON ({error.msg} at character {error.pos})"
        ) from None
    if not isinstance(options, dict):
        raise ConfigError(f"{source}: must be a JSON object of option names to values")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}


def resolve_storage(
    home: str | None = None,
    lancedb_uri: str | None = None,
    tracking_url: str | None = None,
    staging_dir: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> StorageLocations:
    """Explicit arguments win, then the environment, then folders under the home."""
    home_path = Path(home or os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser().resolve()
    lance = lancedb_uri or os.environ.get(LANCEDB_URI_ENV) or str(home_path / "lancedb")
    tracking = (
        tracking_url or os.environ.get(TRACKING_URL_ENV) or f"sqlite:///{home_path / 'tracking.db'}"
    )
    staging = staging_dir or os.environ.get(STAGING_DIR_ENV) or str(home_path / "staging")
    if "://" not in staging:
        staging = str(Path(staging).expanduser().resolve())
    options = (
        storage_options
        if storage_options is not None
        else parse_storage_options(os.environ.get(STORAGE_OPTIONS_ENV))
    )
    return StorageLocations(home_path, lance, tracking, staging, options)
