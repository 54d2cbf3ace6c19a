"""What the Batch API driver asks a provider, whatever its API (`BatchClient`), and the OpenAI
Batch API's answer to it (`OpenAIBatches`, through the official `openai` client at any
OpenAI-compatible base URL).

A provider's client creates a batch of request lines, says a batch's status in the OpenAI
Batch API's words (`RemoteBatch`: `validating` ... `completed`, `expired`, `failed`,
`cancelled`), reads a finished batch's answers as `BatchResult`s, finds the batch a crashed
run created but did not record, and cancels one. Another provider's client (Anthropic's
Message Batches: `executors.anthropic_batch`) answers the same questions; the driver, the
ledger, the provider-batch sensors and `batches drop` are the same for every provider.
Errors are `ProviderBatchError`s without the key; a batch or file the provider no longer has
is `NotFound`.
"""

import hashlib
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from batch_pipeline.executors.batch_api import BatchApiSettings, BatchLedger, ProviderBatchError
from batch_pipeline.executors.batch_file import BatchResult, read_results
from batch_pipeline.state.tracking import ProviderBatch

FILE_HASH = "file_sha256"  # the metadata key naming a batch's file, to find it at the provider


class NotFound(Exception):  # noqa: N818 - a batch or file the provider no longer has
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)
class BatchError:
    """One of a failed batch's errors: a provider's validation of its file."""

    code: str | None
    message: str
    line: int | None = None  # the line of the input file it names, if any

    def said(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{self.code}{where}: {self.message}"


@dataclass(frozen=True)
class RemoteBatch:
    """A batch as the provider sees it, in the OpenAI Batch API's words."""

    id: str
    status: str
    errors: tuple[BatchError, ...] = ()  # why it failed, where it did
    created_at: float = 0.0
    metadata: dict = field(default_factory=dict)
    # where its answers are, as the provider's client reads them back (`results`)
    output_file_id: str | None = None
    error_file_id: str | None = None


class BatchClient(Protocol):
    """What the driver asks a provider (see the module docstring)."""

    wire: ClassVar[str]  # the API it speaks, recorded with each batch ("openai", ...)
    key_env: ClassVar[str]  # where its key is, unless the settings name another variable

    def upload(self, path: Path) -> str:
        """The batch file handed to the provider, where it keeps files; its file id."""
        ...

    def create(
        self, path: Path, file_id: str, endpoint: str, window: str, metadata: dict
    ) -> RemoteBatch:
        """One batch of the file's requests, created once (no retry: a retried creation the
        provider had accepted is a second batch, billed twice)."""
        ...

    def retrieve(self, batch_id: str) -> RemoteBatch:
        """The batch's status; NotFound where the provider has no such batch."""
        ...

    def results(self, remote: RemoteBatch, unreadable: list[str]) -> dict[str, BatchResult]:
        """A finished batch's answers by custom_id; a line that cannot be read is noted in
        `unreadable` (and is its request's failure where it names one); NotFound naming
        what is gone."""
        ...

    def request_ids(self, batch: ProviderBatch) -> set[str]:
        """The custom_ids a batch recorded before they were asked, from the provider."""
        ...

    def find_created(self, ledger: BatchLedger, intent: ProviderBatch) -> RemoteBatch | None:
        """The provider's batch made from `intent` and not recorded; None where none is."""
        ...

    def cancel(self, batch_id: str) -> None:
        """Cancel the batch at the provider; NotFound where it has no such batch."""
        ...


def file_digest(path: Path) -> tuple[str, list[str]]:
    """A batch file's SHA-256 and its requests' custom_ids."""
    digest = hashlib.sha256()
    ids = []
    with path.open("rb") as lines:
        for line in lines:
            digest.update(line)
            if line.strip():
                ids.append(json.loads(line)["custom_id"])
    return digest.hexdigest(), ids


@contextmanager
def provider_errors(
    api: BatchApiSettings, key: str, said: str, status_error: type, connection_error: type
) -> Iterator[None]:
    """A provider client's errors (its `status_error` and `connection_error` classes) as
    ProviderBatchError, saying which API at which address, without the key: transient where
    the API said so (a connection, a timeout, a 429, a 5xx or an overload)."""
    try:
        yield
    except status_error as error:
        status = error.status_code
        raise ProviderBatchError(
            api.clean(f"{said} at {api.api_base}: {error.message}", key),
            transient=status == 429 or status >= 500,
        ) from None
    except connection_error as error:
        raise ProviderBatchError(
            api.clean(f"{said} at {api.api_base}: {error.message}", key), transient=True
        ) from None


def unrecorded(ledger: BatchLedger, batch_id: str) -> bool:
    """Whether no ledger records the provider's batch `batch_id` yet."""
    return ledger.tracking.provider_batch(batch_id) is None


class OpenAIBatches:
    """The OpenAI Batch API (files, `/v1/batches`) through the official client."""

    wire: ClassVar[str] = "openai"
    key_env: ClassVar[str] = "OPENAI_API_KEY"

    def __init__(self, client) -> None:  # noqa: ANN001 - an `openai.OpenAI`
        self.client = client

    @classmethod
    @contextmanager
    def opened(cls, api: BatchApiSettings, key: str) -> Iterator["OpenAIBatches"]:
        """The official client at `api.api_base`, its errors as ProviderBatchError
        (`provider_errors`)."""
        import openai

        client = openai.OpenAI(base_url=api.api_base, api_key=key, max_retries=2)
        errors = (openai.APIStatusError, openai.APIConnectionError)
        try:
            with provider_errors(api, key, "Batch API", *errors):
                yield cls(client)
        finally:
            client.close()

    @staticmethod
    def _remote(batch) -> RemoteBatch:  # noqa: ANN001 - the client's Batch
        errors = getattr(getattr(batch, "errors", None), "data", None) or []
        return RemoteBatch(
            id=batch.id,
            status=str(batch.status),
            errors=tuple(BatchError(e.code, e.message, getattr(e, "line", None)) for e in errors),
            created_at=float(getattr(batch, "created_at", None) or 0),
            metadata=dict(getattr(batch, "metadata", None) or {}),
            output_file_id=batch.output_file_id,
            error_file_id=batch.error_file_id,
        )

    def _content(self, file_id: str, what: str):  # noqa: ANN202
        import openai

        try:
            return self.client.files.content(file_id)
        except openai.NotFoundError:
            raise NotFound(what) from None

    def upload(self, path: Path) -> str:
        with path.open("rb") as handle:
            return self.client.files.create(file=(path.name, handle), purpose="batch").id

    def create(
        self, path: Path, file_id: str, endpoint: str, window: str, metadata: dict
    ) -> RemoteBatch:
        created = self.client.with_options(max_retries=0).batches.create(
            input_file_id=file_id, endpoint=endpoint, completion_window=window, metadata=metadata
        )
        return self._remote(created)

    def retrieve(self, batch_id: str) -> RemoteBatch:
        import openai

        try:
            return self._remote(self.client.batches.retrieve(batch_id))
        except openai.NotFoundError:
            raise NotFound("the batch") from None

    def results(self, remote: RemoteBatch, unreadable: list[str]) -> dict[str, BatchResult]:
        """The batch's output and error files, joined by custom_id."""
        with tempfile.TemporaryDirectory(prefix="openai-batch-") as folder:
            outputs, errors = [], []
            for file_id, found, what in (
                (remote.output_file_id, outputs, "its output file"),
                (remote.error_file_id, errors, "its error file"),
            ):
                if file_id:
                    path = Path(folder) / f"{file_id}.jsonl"
                    path.write_bytes(self._content(file_id, what).content)
                    found.append(path)
            return read_results(outputs, errors, unreadable)

    def request_ids(self, batch: ProviderBatch) -> set[str]:
        """Read back from the provider's copy of the batch's input file."""
        text = self._content(batch.input_file_id, "its input file").text
        return {json.loads(line)["custom_id"] for line in text.splitlines() if line.strip()}

    def find_created(self, ledger: BatchLedger, intent: ProviderBatch) -> RemoteBatch | None:
        """By the file's hash in the batch's metadata, for the intent's generation and
        partition; batches are listed newest first, back to an hour before the intent."""
        oldest = intent.submitted_at - 3600
        for listed in self.client.batches.list(limit=100):
            remote = self._remote(listed)
            if remote.created_at < oldest:
                break
            meta = remote.metadata
            if (
                meta.get(FILE_HASH) == intent.file_sha256
                and meta.get("generation") == ledger.generation[:512]
                and meta.get("partition") == ledger.partition[:512]
                and remote.status != "cancelled"
                and unrecorded(ledger, remote.id)
            ):
                return remote
        return None

    def cancel(self, batch_id: str) -> None:
        import openai

        try:
            self.client.batches.cancel(batch_id)
        except openai.NotFoundError:
            raise NotFound("the batch") from None
