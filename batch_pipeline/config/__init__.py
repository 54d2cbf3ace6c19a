"""The pipeline's YAML configuration, validated by pydantic.

The whole file (`PipelineConfig`) is here, and the sections every product shares (the model,
sensors, schedule, freshness, cost, prepare, maintenance, generations, limits) in `shared`;
each product's own section is in its module: `index` (collections), `briefs` (a
collection's `briefs:`), `tickets` (`tickets:`), with the sources in `sources` and the strict
base in `base`. Everything is importable from here.

`load_config()` reads `BATCH_PIPELINE_CONFIG` (default `pipeline.yaml` in the working
directory) and fails with `ConfigError`, naming the field's path and the reason, on any bad
value.
"""

import os
from pathlib import Path
from typing import Any

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
    _Strict,
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
from batch_pipeline.config.shared import (
    DEFAULT_DEVICE_HOUR,
    DEVICE_KINDS,
    CostConfig,
    FreshnessConfig,
    GenerationsConfig,
    LimitsConfig,
    MaintenanceConfig,
    ModelConfig,
    PrepareConfig,
    ScheduleConfig,
    SensorConfig,
)
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
