"""A Batch API executor's settings and ledger, whatever its model family: where its
batches go and on what terms (`BatchApiSettings`: the base URL, the key's environment
variable, the completion window, the prices, how long a run waits), the ledger of a
partition's batches the frame hands it (`BatchLedger`, `with_ledger`), its errors
(`ProviderBatchError`) and the key kept out of every message (`scrubbed`).

The driver that collects, submits and waits is `executors.batch_driver`; the official client
and what it asks the provider, `executors.batch_client`; the execute every family runs,
`executors.provider_execute`.
"""

import os
from dataclasses import dataclass, replace

from batch_pipeline.config import ConfigError
from batch_pipeline.config.base import window_seconds
from batch_pipeline.config.secrets import masked_url, url_secrets
from batch_pipeline.executors import Executor
from batch_pipeline.measures.run import PROVIDER
from batch_pipeline.state.tracking import ProviderBatch, TrackingStore

NAME = "openai-batch"  # the executor's name in every family
DEVICE = PROVIDER  # what the run's measures name as the device: priced by tokens
SHORT_KEY = 8  # characters of a key a message may keep: enough to tell keys apart


class ProviderBatchError(RuntimeError):
    """The Batch API refused a call or a batch failed; the message holds no key."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient  # worth a retry as it is (batch_pipeline.transient)


@dataclass(frozen=True)
class BatchApiSettings:
    """Where and how an `openai-batch` executor submits (`run --api-base` and its flags, or
    the generation and inference resources' fields, set these)."""

    api_base: str
    api_key_env: str | None = None  # None: the provider's own (OPENAI_API_KEY, ...)
    model: str | None = None  # the provider's name of the model; None: the configured one's
    completion_window: str = "24h"
    poll_seconds: float = 5.0  # the first wait between polls, doubled up to max_poll_seconds
    max_poll_seconds: float = 300.0
    wait_seconds: float | None = 0.0  # None: until every batch finished; 0: submit, return
    price_per_million_input_tokens: float = 0.0
    price_per_million_output_tokens: float = 0.0

    def __post_init__(self) -> None:
        window_seconds(self.completion_window)  # a ConfigError naming the window it cannot read

    def api_key(self, provider_env: str = "OPENAI_API_KEY") -> str:
        """The key, from `api_key_env`, or where none is set from the provider's own
        variable (`provider_env`: its client's `key_env`)."""
        variable = self.api_key_env or provider_env
        key = os.environ.get(variable)
        if not key:
            raise ConfigError(
                f"the Batch API's key is read from ${variable}, which is not set (`run "
                "--api-key-env` or the resource's api_key_env names another variable)"
            )
        return key

    @property
    def token_prices(self) -> tuple[float, float]:
        """The provider's batch prices per million input and output tokens."""
        return self.price_per_million_input_tokens, self.price_per_million_output_tokens

    @property
    def shown_base(self) -> str:
        """`api_base` as it may be printed: a password or key it carries masked."""
        return masked_url(self.api_base)

    def clean(self, text: str, key: str = "") -> str:
        """`text` as it may be printed: without the key (`scrubbed`), with `api_base` masked
        and none of its credentials, wherever the text quotes them."""
        text = text.replace(self.api_base, self.shown_base)
        for secret in url_secrets(self.api_base):
            text = text.replace(secret, "***")
        return scrubbed(text, key)

    def served_model(self, configured: str) -> str | None:
        """The provider's model where it is not the `configured` one: another model, whose
        outputs are another generation's."""
        return self.model if self.model not in (None, configured) else None


@dataclass(frozen=True)
class BatchLedger:
    """Where one partition's batches are recorded: the tracking store, under the generation
    and the partition."""

    tracking: TrackingStore
    generation: str
    partition: str

    def uncollected(self) -> list[ProviderBatch]:
        return self.tracking.provider_batches(self.generation, self.partition, uncollected=True)

    def intend(
        self,
        run_id: str,
        file_id: str,
        file_sha256: str,
        custom_ids: list[str],
        attempt: int,
        api_base: str | None = None,
        wire: str | None = None,
    ) -> str:
        """Record a batch before it is created (its placeholder id), where it goes
        (`api_base`, credentials masked) and the API it speaks there (`wire`)."""
        return self.tracking.record_batch_intent(
            self.generation,
            self.partition,
            run_id,
            file_id,
            file_sha256,
            custom_ids,
            attempt,
            api_base,
            wire,
        )


def with_ledger(executor: Executor, ledger: BatchLedger) -> Executor:
    """`executor` recording its provider batches in `ledger` (the frame's, for the partition
    a run executes: `runs.partition.StagedPartition.execute`); an executor that sends none,
    as it is."""
    if executor.capabilities.provider_batches:
        return replace(executor, ledger=ledger)
    return executor


def scrubbed(text: str, key: str) -> str:
    """`text` without the key, or any run of it long enough to leak (a provider's 401 quotes
    its start and end)."""
    if not key:
        return text
    text = text.replace(key, "***")
    for start in range(len(key) - SHORT_KEY):
        piece = key[start : start + SHORT_KEY + 1]
        if piece in text:
            text = text.replace(piece, "***")
    return text


def provider_settings_problem(device: str, dtype: str) -> tuple[str, str] | None:
    """Every Batch API executor's `settings_problem`: the device and the dtype are the
    provider's to choose, so only `auto` is taken for them."""
    for setting, value in (("device", device), ("dtype", dtype)):
        if value != "auto":
            return (
                setting,
                f"{value!r} is the provider's to choose on a Batch API executor; leave it auto",
            )
    return None
