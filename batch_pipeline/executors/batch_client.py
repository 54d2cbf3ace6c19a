"""The official `openai` client at a Batch API's base URL (`batch_client`: its errors as
`ProviderBatchError`, without the key), and what the driver asks the provider through it:
a file's content, a failed batch's errors, a batch file's digest, and the batch a crashed
run created but did not record (`find_created`, by the file's digest in its metadata).
"""

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from batch_pipeline.executors.batch_api import BatchApiSettings, BatchLedger, ProviderBatchError
from batch_pipeline.state.tracking import ProviderBatch

FILE_HASH = "file_sha256"  # the metadata key naming a batch's file, to find it at the provider


class NotFound(Exception):  # noqa: N818 - a file the provider no longer has
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def file_content(client, file_id: str, what: str):  # noqa: ANN001, ANN202
    """A file's content at the provider; NotFound naming `what` where it is gone."""
    import openai

    try:
        return client.files.content(file_id)
    except openai.NotFoundError:
        raise NotFound(what) from None


def error_said(error) -> str:  # noqa: ANN001 - a failed batch's error (the client's BatchError)
    """One of a failed batch's errors: its code, the line of the input file it names, its
    message (a provider's validation of the file: a model it does not serve, a bad field)."""
    line = getattr(error, "line", None)
    where = f" (line {line})" if line is not None else ""
    return f"{error.code}{where}: {error.message}"


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


def find_created(client, ledger: BatchLedger, intent: ProviderBatch):  # noqa: ANN001, ANN202
    """The provider's batch made from `intent`'s file for its generation and partition, not
    already recorded; None where there is none. Batches are listed newest first, back to an
    hour before the intent was recorded."""
    oldest = intent.submitted_at - 3600
    for remote in client.batches.list(limit=100):
        if (getattr(remote, "created_at", None) or 0) < oldest:
            break
        meta = getattr(remote, "metadata", None) or {}
        if (
            meta.get(FILE_HASH) == intent.file_sha256
            and meta.get("generation") == ledger.generation[:512]
            and meta.get("partition") == ledger.partition[:512]
            and str(remote.status) != "cancelled"
            and ledger.tracking.provider_batch(remote.id) is None
        ):
            return remote
    return None


@contextmanager
def batch_client(api: BatchApiSettings, key: str) -> Iterator[object]:
    """The official client at `api.api_base`; its errors as ProviderBatchError, without the
    key (transient where the API said so: a connection, a timeout, a 429 or a 5xx)."""
    import openai

    client = openai.OpenAI(base_url=api.api_base, api_key=key, max_retries=2)
    try:
        yield client
    except openai.APIStatusError as error:
        status = error.status_code
        transient = status == 429 or status >= 500
        raise ProviderBatchError(
            api.clean(f"Batch API at {api.api_base}: {error.message}", key),
            transient=transient,
        ) from None
    except openai.APIConnectionError as error:
        raise ProviderBatchError(
            api.clean(f"Batch API at {api.api_base}: {error.message}", key), transient=True
        ) from None
    finally:
        client.close()
