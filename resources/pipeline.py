"""The pipeline resource: the configuration, the storage locations and stores, and what
opening any product takes (`product_env`); it names no product."""

from collections.abc import Callable
from typing import TypeVar

import dagster as dg
from dagster_aws.s3 import S3Resource
from pydantic import Field, PrivateAttr

from batch_pipeline.config import PipelineConfig, load_config
from batch_pipeline.config.sources import S3Location
from batch_pipeline.declaration import ProductEnv
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.products import product_env
from batch_pipeline.state.storage import StorageLocations, resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore

T = TypeVar("T")


class PipelineResource(dg.ConfigurableResource):
    """Loads the YAML configuration and opens the tracking store and the LanceDB index.

    Unset fields fall back to the environment (`BATCH_PIPELINE_CONFIG`, `BATCH_PIPELINE_HOME`,
    `BATCH_PIPELINE_LANCEDB_URI`, `BATCH_PIPELINE_TRACKING_URL`, `BATCH_PIPELINE_STAGING_DIR`,
    `BATCH_PIPELINE_STORAGE_OPTIONS`) and then to folders under the pipeline home.
    """

    config_path: str | None = Field(
        default=None,
        description="Pipeline YAML file; default $BATCH_PIPELINE_CONFIG or pipeline.yaml.",
    )
    home: str | None = Field(
        default=None, description="State folder; default $BATCH_PIPELINE_HOME or .batch_pipeline."
    )
    lancedb_uri: str | None = Field(
        default=None, description="LanceDB URI (a folder or s3://...); default <home>/lancedb."
    )
    tracking_url: str | None = Field(
        default=None, description="SQLAlchemy URL of the tracking store; default SQLite in home."
    )
    staging_dir: str | None = Field(
        default=None,
        description="Folder or s3://... prefix for the stages' Parquet files; "
        "default <home>/staging.",
    )

    _config: PipelineConfig = PrivateAttr()
    _storage: StorageLocations = PrivateAttr()
    _tracking: TrackingStore = PrivateAttr()
    _store: VectorStore = PrivateAttr()
    # the run's products opened once (`opened`), by key
    _opened: dict = PrivateAttr(default_factory=dict)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._config = load_config(self.config_path)
        self._storage = resolve_storage(
            self.home, self.lancedb_uri, self.tracking_url, self.staging_dir
        )
        self._tracking = TrackingStore(self._storage.tracking_url)
        self._store = VectorStore(self._storage.lancedb_uri, self._storage.storage_options)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self._tracking.dispose()

    @property
    def config(self) -> PipelineConfig:
        return self._config

    @property
    def storage(self) -> StorageLocations:
        return self._storage

    def product_env(
        self, s3: S3Resource | None = None, execution: ExecutorChoice | None = None
    ) -> ProductEnv:
        """What opening any product takes (`ProductKind.open`): the configuration, the stores,
        S3 sources read through `s3` (with each source's own endpoint and region), and plans
        run by the executor `execution` names (the inference resource's)."""
        return product_env(
            self._config,
            self._storage,
            self._tracking,
            self._store,
            execution=execution,
            s3_client=lambda source: _s3_client(s3, source),
        )

    def opened(self, key: str, open_product: Callable[[], T]) -> T:
        """The product `key` names, opened once per run by `open_product`: what it read when
        opened (a prompt, a schema, a model's fingerprint) is pinned for the run's other
        steps, which the code location runs in one process."""
        if key not in self._opened:
            self._opened[key] = open_product()
        return self._opened[key]


def _s3_client(s3: S3Resource | None, source: S3Location):  # noqa: ANN202
    """A client from the S3 resource, with the source's own endpoint and region (a
    collection's source, or the ticket export's)."""
    resource = s3 or S3Resource()
    overrides = {
        k: v
        for k, v in (("endpoint_url", source.endpoint_url), ("region_name", source.region))
        if v
    }
    if overrides:
        resource = S3Resource(**{**resource.model_dump(), **overrides})
    return resource.get_client()
