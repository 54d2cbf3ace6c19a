"""The `anthropic-batch` generation executor: the prompt plan through Anthropic's Message
Batches API (`/v1/messages/batches`, with the official `anthropic` client), at half the
price of the same requests one by one, as OpenAI's Batch API is.

Everything but the wire is the `openai-batch` executor's: the plan, the ledger of batches
(each recorded before it is created), collect -> submit -> wait, the resend of requests that
failed for a reason that says nothing of them, the checkpoints and the key kept out of every
message (`executors.batch_driver`). What differs is the client (`AnthropicBatches`):

- no files: a batch is created with its requests in the call, each a chat completion line
  of the plan turned into Messages parameters (`message_request`: the system message as
  `system`, the output schema as `output_config.format`);
- the status is `in_progress`, `canceling` or `ended` (said in the OpenAI Batch API's words
  the driver reads: `completed`, or `cancelled` where a cancellation began);
- each result is `succeeded` (the message's text, its stop reason and usage), `errored`
  (an `invalid_request_error` is the request's own failure; an API, overload or rate error
  says nothing of it and is sent again once), `expired` (sent again once) or `canceled`
  (no answer: the next run plans it again);
- batches carry no metadata, so a creation that answered an error is found at the provider
  as the one batch created since its intent was recorded with as many requests, which no
  ledger holds (`find_created`); where there is not exactly one, the intent's requests are
  sent again.

The Messages API has no `repetition_penalty` or `seed`: a briefs section that sets a
repetition penalty is refused when the executor is chosen, and the seed is not sent. The
completion window is Anthropic's 24 hours.
"""

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.batch_api import BatchApiSettings, BatchLedger, ProviderBatchError
from batch_pipeline.executors.batch_client import (
    NotFound,
    RemoteBatch,
    provider_errors,
    unrecorded,
)
from batch_pipeline.executors.batch_file import (
    CHAT_COMPLETIONS,
    BatchResult,
    read_lines,
    result_of,
)
from batch_pipeline.executors.openai_batch import OpenAIBatchExecutor
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.stages.prompt_plan import PromptPlanSettings
from batch_pipeline.state.tracking import ProviderBatch

NAME = "anthropic-batch"
WINDOW = "24h"  # Anthropic's: a batch's requests not run in 24 hours expire
# a stop reason in the words every generation executor's outputs are judged in
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}
# errors of the provider, not the request: worth sending again
TRANSIENT = frozenset({"api_error", "overloaded_error", "rate_limit_error", "timeout_error"})
ADOPT_SKEW = 60.0  # seconds a provider's clock may run behind ours when finding a batch


def message_request(line: dict) -> dict:
    """A chat completion line of the plan (`batch_file.request_line`) as one request of a
    Message Batch: `{custom_id, params}`."""
    body = line["body"]
    messages = body["messages"]
    params: dict[str, object] = {
        "model": body["model"],
        "max_tokens": body["max_tokens"],
        "temperature": body["temperature"],
        "messages": [m for m in messages if m["role"] != "system"],
    }
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    if system:
        params["system"] = system
    schema = (body.get("response_format") or {}).get("json_schema")
    if schema is not None:
        params["output_config"] = {"format": {"type": "json_schema", "schema": schema["schema"]}}
    return {"custom_id": line["custom_id"], "params": params}


def message_result(line: dict) -> BatchResult | None:
    """One line of a Message Batch's results as a result; None for a request the batch's
    cancellation kept from running (no answer: planned again)."""
    key, result = line["custom_id"], line.get("result")
    if result is None:  # an unreadable line that still names its request
        return result_of(line)
    kind = result.get("type")
    try:
        if kind == "succeeded":
            message = result["message"]
            text = "".join(b["text"] for b in message["content"] if b.get("type") == "text")
            stop = message.get("stop_reason")
            usage = message.get("usage") or {}
            return BatchResult(
                key,
                text,
                FINISH.get(stop, stop),
                int(usage.get("input_tokens") or 0),
                int(usage.get("output_tokens") or 0),
            )
        if kind == "errored":
            error = result.get("error") or {}
            error = error.get("error") or error  # the API's error envelope, or the error
            code = error.get("type") or "error"
            said = f"{code}: {error.get('message') or 'no message'}"
            return BatchResult(key, None, None, error=said, retryable=code in TRANSIENT)
        if kind == "expired":
            said = "expired: the batch's 24 hours ended before this request ran"
            return BatchResult(key, None, None, error=said, retryable=True)
        if kind == "canceled":
            return None
    except (KeyError, TypeError, ValueError) as error:
        return BatchResult(key, None, None, error=f"malformed result ({error!r})")
    return BatchResult(key, None, None, error=f"malformed result (type {kind!r})")


def _timestamp(value: object) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value or 0)


class AnthropicBatches:
    """Anthropic's Message Batches API through the official client (see the module
    docstring); `executors.batch_client.BatchClient`."""

    wire: ClassVar[str] = "anthropic"
    key_env: ClassVar[str] = "ANTHROPIC_API_KEY"

    def __init__(self, client) -> None:  # noqa: ANN001 - an `anthropic.Anthropic`
        self.client = client

    @classmethod
    @contextmanager
    def opened(cls, api: BatchApiSettings, key: str) -> Iterator["AnthropicBatches"]:
        """The official client at `api.api_base` (`https://api.anthropic.com`), its errors
        as ProviderBatchError (`provider_errors`: a 529 overload is transient)."""
        import anthropic

        client = anthropic.Anthropic(base_url=api.api_base, api_key=key, max_retries=2)
        errors = (anthropic.APIStatusError, anthropic.APIConnectionError)
        try:
            with provider_errors(api, key, "Message Batches API", *errors):
                yield cls(client)
        finally:
            client.close()

    @staticmethod
    def _remote(batch) -> RemoteBatch:  # noqa: ANN001 - the client's MessageBatch
        status = batch.processing_status
        if status == "ended":
            status = "cancelled" if batch.cancel_initiated_at is not None else "completed"
        elif status == "canceling":
            status = "cancelling"
        return RemoteBatch(
            id=batch.id,
            status=status,
            created_at=_timestamp(batch.created_at),
            output_file_id=batch.results_url,
        )

    def upload(self, path: Path) -> str:
        """Nothing: a Message Batch's requests go in its creation, not in a file."""
        return ""

    def create(
        self, path: Path, file_id: str, endpoint: str, window: str, metadata: dict
    ) -> RemoteBatch:
        if endpoint != CHAT_COMPLETIONS:
            raise ProviderBatchError(
                f"the {NAME} executor sends chat requests only, not {endpoint}"
            )
        with path.open(encoding="utf-8") as lines:
            requests = [message_request(json.loads(line)) for line in lines if line.strip()]
        batches = self.client.with_options(max_retries=0).messages.batches
        return self._remote(batches.create(requests=requests))

    def retrieve(self, batch_id: str) -> RemoteBatch:
        import anthropic

        try:
            return self._remote(self.client.messages.batches.retrieve(batch_id))
        except anthropic.NotFoundError:
            raise NotFound("the batch") from None

    def results(self, remote: RemoteBatch, unreadable: list[str]) -> dict[str, BatchResult]:
        """The batch's results, read line by line (a line that cannot be read fails its
        request alone); of two lines for one request, an answer beats an error."""
        import anthropic

        found: dict[str, BatchResult] = {}
        with tempfile.TemporaryDirectory(prefix="anthropic-batch-") as folder:
            path = Path(folder) / f"{remote.id}.jsonl"
            try:
                streamed = self.client.messages.batches.with_streaming_response.results
                with streamed(remote.id) as response, path.open("wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
            except anthropic.NotFoundError:
                raise NotFound("its results file") from None
            for _number, line in read_lines(path, unreadable):
                result = message_result(line)
                known = None if result is None else found.get(result.key)
                if result is not None and (known is None or known.error is not None):
                    found[result.key] = result
        return found

    def request_ids(self, batch: ProviderBatch) -> set[str]:
        """A Message Batch keeps no input file to read them back from."""
        raise NotFound("its requests' ids, which this provider does not give back")

    def find_created(self, ledger: BatchLedger, intent: ProviderBatch) -> RemoteBatch | None:
        """The one batch created since the intent was recorded, with its many requests, that
        no ledger holds (Message Batches carry no metadata to match); None where there is
        not exactly one (two runs creating batches of one size in the same minute)."""
        oldest = intent.submitted_at - ADOPT_SKEW
        found = []
        for listed in self.client.messages.batches.list(limit=100):
            if _timestamp(listed.created_at) < oldest:
                break
            counts = listed.request_counts
            total = sum((counts.processing, counts.succeeded, counts.errored, counts.canceled))
            if (
                total + counts.expired == intent.requests
                and listed.cancel_initiated_at is None
                and unrecorded(ledger, listed.id)
            ):
                found.append(self._remote(listed))
        return found[0] if len(found) == 1 else None

    def cancel(self, batch_id: str) -> None:
        import anthropic

        try:
            self.client.messages.batches.cancel(batch_id)
        except anthropic.NotFoundError:
            raise NotFound("the batch") from None


@dataclass(frozen=True)
class AnthropicBatchExecutor(OpenAIBatchExecutor):
    """Generates through Anthropic's Message Batches (see the module docstring)."""

    client: ClassVar[type] = AnthropicBatches
    name: ClassVar[str] = NAME

    @classmethod
    def chosen(
        cls,
        generator: Generator,
        sampling: Sampling,
        schema: dict | None,
        settings: PromptPlanSettings,
        choice: ExecutorChoice,
    ) -> "AnthropicBatchExecutor":
        """As `openai-batch`'s, refusing what the Messages API cannot send or honour."""
        if sampling.repetition_penalty != 1.0:
            raise ConfigError(
                f"repetition_penalty: the {NAME} executor cannot send one (Anthropic's "
                "Messages API has none); set it to 1"
            )
        api = choice.batch_api
        if api is not None and api.completion_window != WINDOW:
            raise ConfigError(
                f"{choice.spelled('completion_window')}: Anthropic's Message Batches run "
                f"within {WINDOW}, not {api.completion_window}"
            )
        return super().chosen(generator, sampling, schema, settings, choice)
