"""The ticket intents' section (`tickets:`): the exports, the taxonomy, the labelled set,
training and the schedule."""

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from batch_pipeline.config.base import (
    _existing_file,
    _existing_folder,
    _Strict,
    valid_timezone,
    window_seconds,
)
from batch_pipeline.config.executors import known_executor, provider_batch_executors
from batch_pipeline.config.index import CollectionConfig
from batch_pipeline.config.sources import S3Location, _SqlConnection
from batch_pipeline.config.taxonomy import TaxonomyError, load_taxonomy
from batch_pipeline.names import GENERATE


class TicketFolderExport(_Strict):
    """Daily ticket exports in a folder: one JSONL file per day."""

    kind: Literal["filesystem"] = "filesystem"
    path: Path = Field(description="Folder holding the exports; relative to the config file.")
    file_pattern: str = Field(
        default="{day}.jsonl", description="A day's file name; {day} is the ISO date."
    )

    _resolve_path = field_validator("path")(_existing_folder)


class TicketS3Export(S3Location):
    """Daily ticket exports in an S3 bucket: one JSONL object per day under a prefix."""

    kind: Literal["s3"]
    bucket: str = Field(min_length=3, description="Bucket name.")
    prefix: str = Field(default="tickets/", description="Keys under this prefix.")
    file_pattern: str = Field(
        default="{day}.jsonl", description="A day's key below the prefix; {day} is the ISO date."
    )


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


class FineTuneConfig(_Strict):
    """Contrastive fine-tuning of the encoder on the labelled history and the taxonomy's
    examples before the head is trained (`batch_pipeline.tickets.classifier.fine_tune`):
    pairs of texts of one intent, the other intents' texts in the batch as negatives. The
    fine-tuned encoder is a model of its own: its generation's fingerprint has the base
    model, the labelled history's hash, the taxonomy and this recipe."""

    steps: int = Field(
        default=600, ge=1, le=1_000_000, description="Training steps (one batch of pairs each)."
    )
    learning_rate: float = Field(
        default=3e-5, gt=0, le=1e-2, description="AdamW's peak learning rate (linear decay)."
    )
    batch_pairs: int = Field(
        default=32,
        ge=2,
        le=1024,
        description="Pairs per step, each of a different intent (fewer when fewer intents "
        "have two labelled texts).",
    )
    seed: int = Field(default=2026, description="Seeds the pairs drawn and torch.")
    max_minutes: float = Field(
        default=30,
        gt=0,
        description="Training stops here even before `steps`, so that it fits the nightly "
        "window (`schedule.window_minutes`); the run reports which ended it.",
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

    calibration: Literal["temperature", "none"] = Field(
        default="temperature",
        description="temperature: a ticket's confidence and top scores are probabilities "
        "made honest by temperature scaling, fitted on the held-out share; none: the head's "
        "own scores. `unknown` (and min_confidence) reads the head's own scores either way.",
    )

    fine_tune: FineTuneConfig | None = Field(
        default=None,
        description="Fine-tune the encoder on the labelled tickets before training the head "
        "(off unless set; `fine_tune: {}` takes the defaults). A fine-tuned generation must "
        "beat the frozen encoder's on the evaluation set to go live.",
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


class CascadeBatchApiConfig(_Strict):
    """Where the cascade's `openai-batch` executor submits: a provider's Batch API, or a
    self-hosted gateway's."""

    api_base: str = Field(
        description="The Batch API's base URL (https://api.openai.com/v1, or a gateway's)."
    )
    api_key_env: str | None = Field(
        default=None,
        description="The environment variable holding the API key (the key itself is never "
        "configured, logged or recorded); unset, the provider's own: OPENAI_API_KEY, or "
        "ANTHROPIC_API_KEY for anthropic-batch.",
    )
    model: str | None = Field(
        default=None,
        description="The provider's name of the chat model; unset, the configured chat "
        "model's. Part of the generation.",
    )
    completion_window: str = Field(default="24h", description="The batches' completion window.")
    wait_seconds: float | None = Field(
        default=None,
        ge=0,
        description="How long a run waits for the chat model's answers; those not back by then "
        "are collected by the next run (tickets land with the classifier's intent meanwhile). "
        "Unset: until every answer is back.",
    )
    price_per_million_input_tokens: float = Field(
        default=0.0, ge=0, description="The provider's batch price of input tokens."
    )
    price_per_million_output_tokens: float = Field(
        default=0.0, ge=0, description="The provider's batch price of output tokens."
    )

    @field_validator("completion_window")
    @classmethod
    def _window(cls, value: str) -> str:
        window_seconds(value)  # a ConfigError (a ValueError) saying what it cannot read
        return value


class CascadeConfig(_Strict):
    """Send the tickets the classifier is least sure of to a chat model, answering from the
    taxonomy's intents (or `unknown`) under a JSON schema's `enum`, with a threshold chosen
    so that the combined accuracy meets `target_accuracy` with probability at least
    1 - `delta` (`batch_pipeline.tickets.cascade.threshold`). Part of the generation:
    changing it is a new generation that must pass the gate."""

    target_accuracy: float = Field(
        gt=0,
        le=1,
        description="The accuracy the classifier and the chat model together must reach on "
        "tickets drawn as the held-out labelled ones are.",
    )
    delta: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="The chance allowed that the cascade misses target_accuracy (the bound's "
        "failure probability).",
    )
    label_budget: int = Field(
        default=1000,
        ge=10,
        description="At most this many held-out labelled tickets choose the threshold (the "
        "chat model answers each once).",
    )
    executor: str = Field(
        default="vllm",
        description="The generate executor the chat model runs on, by name: vllm (in the "
        "run's process), vllm-run-batch (vLLM's `run-batch` in a subprocess), or one that "
        "sends a provider's Batch API its batches (openai-batch), which takes `batch_api`.",
    )
    batch_api: CascadeBatchApiConfig | None = Field(
        default=None,
        description="Where its batches go, for an executor that sends them to a provider.",
    )
    chat_model: Path | None = Field(
        default=None,
        description="The chat model's folder (relative to the config); default the shipped "
        "SmolLM2-135M-Instruct (or $BATCH_PIPELINE_CHAT_MODEL).",
    )
    max_tokens: int = Field(
        default=32,
        ge=8,
        le=512,
        description="Output tokens allowed for the chat model's answer (one intent's name).",
    )

    _resolve_chat_model = field_validator("chat_model")(_existing_folder)

    _known_executor = field_validator("executor")(lambda name: known_executor(GENERATE, name))

    @model_validator(mode="after")
    def _batch_api_for_provider_batches(self) -> "CascadeConfig":
        takers = provider_batch_executors(GENERATE)
        if self.executor in takers and self.batch_api is None:
            raise ValueError(f"batch_api: the {self.executor} executor needs one (api_base, ...)")
        if self.executor not in takers and self.batch_api is not None:
            raise ValueError(
                f"batch_api: only {' or '.join(takers)} takes one, not {self.executor}"
            )
        return self


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
    cascade: CascadeConfig | None = Field(
        default=None,
        description="Send the least sure tickets to a chat model, with an accuracy guarantee "
        "(off unless set).",
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
        return valid_timezone(value)

    @model_validator(mode="after")
    def _readable_taxonomy(self) -> "TicketsConfig":
        try:
            load_taxonomy(self.taxonomy)
        except TaxonomyError as error:
            raise ValueError(f"taxonomy: {error}") from None
        return self
