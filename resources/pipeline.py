"""The pipeline resource: configuration, storage locations and the per-collection engine."""

import dagster as dg
from dagster_aws.s3 import S3Resource
from pydantic import Field, PrivateAttr

from batch_pipeline.briefs.kind import brief_product
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.config import PipelineConfig, S3SourceConfig, TicketS3Export, load_config
from batch_pipeline.declaration import ProductEnv
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.generation import DEFAULT_EXECUTOR
from batch_pipeline.executors.openai_batch import BatchApiSettings
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.inference.generator import Generator
from batch_pipeline.stages.prompt_plan import PromptPlanSettings
from batch_pipeline.state.storage import StorageLocations, resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets.product import TicketProduct


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
    # the run's briefs, opened once: their prompt, schema and fingerprint are read at the run's
    # first step and pinned for the rest (the code location runs a run's steps in one process)
    _briefs: dict = PrivateAttr(default_factory=dict)

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

    def partition(
        self,
        partition: str,
        s3: S3Resource | None = None,
        execution: ExecutorChoice | None = None,
    ) -> IndexPartition:
        """The engine for one partition (a collection or one of its shards); S3 sources read
        through `s3`, and its plan embedded by the executor `execution` names (the inference
        resource's)."""
        return IndexPartition(
            self._config,
            self._storage,
            partition,
            self._tracking,
            self._store,
            s3_client=lambda source: _s3_client(s3, source),
            execution=execution,
        )

    def briefs(
        self,
        collection: str,
        generator: Generator,
        plan_settings: PromptPlanSettings,
        s3: S3Resource | None = None,
        executor: str = DEFAULT_EXECUTOR,
        batch_api: BatchApiSettings | None = None,
    ) -> BriefProduct:
        """A collection's document briefs, generating with `generator` (the generation
        resource's); its documents are read as the collection's own partitions read them.
        Opened once per run and collection: a prompt or schema edited while a run goes on
        is the next run's, so the run's briefs land in the generation, and with the prompt
        version, they were rendered for."""
        if collection in self._briefs:
            return self._briefs[collection]
        self._briefs[collection] = product = brief_product(
            self._config,
            self._storage,
            collection,
            self._tracking,
            self._store,
            lambda key: self.partition(key, s3),
            generator,
            plan_settings,
            executor=executor,
            batch_api=batch_api,
        )
        product.fingerprint  # noqa: B018 - read now: the prompt, schema and model, pinned
        return product

    def product_env(self, s3: S3Resource | None = None) -> ProductEnv:
        """What opening any product takes (`ProductKind.open`): the configuration, the stores,
        and a collection partition's documents, read through `s3` where the source is S3."""
        return ProductEnv(
            self._config,
            self._storage,
            self._tracking,
            self._store,
            lambda key: self.partition(key, s3),
        )

    def tickets(
        self, s3: S3Resource | None = None, execution: ExecutorChoice | None = None
    ) -> TicketProduct:
        """The ticket intent product's engine (days come from `.day(partition_key)`), its
        plans embedded by the executor `execution` names (the inference resource's)."""
        source = self._config.tickets.source if self._config.tickets else None
        client = _s3_client(s3, source) if isinstance(source, TicketS3Export) else None
        return TicketProduct(
            self._config, self._storage, self._tracking, self._store, client, execution
        )


def _s3_client(s3: S3Resource | None, source: S3SourceConfig | TicketS3Export):  # noqa: ANN202
    """A client from the S3 resource, with the source's own endpoint and region."""
    resource = s3 or S3Resource()
    overrides = {
        k: v
        for k, v in (("endpoint_url", source.endpoint_url), ("region_name", source.region))
        if v
    }
    if overrides:
        resource = S3Resource(**{**resource.model_dump(), **overrides})
    return resource.get_client()
