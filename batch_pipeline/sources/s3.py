"""Documents in an S3 bucket under a prefix. The doc id is the object key; the version its ETag
and LastModified second (`object_version`), so a copy that changes only the object's metadata
is a new version too.

The boto3 client comes from the caller: dagster-aws's `S3Resource` in Dagster, a plain boto3
client in the CLI. Credentials, region and endpoint are never part of this module.
"""

import fnmatch
from collections.abc import Iterator
from typing import TYPE_CHECKING

from batch_pipeline.sources.base import (
    ChangeSet,
    DocumentReadError,
    DocumentSource,
    RawDocument,
    SourceEntry,
    SourceUnavailableError,
)
from batch_pipeline.transient import is_transient

if TYPE_CHECKING:
    from batch_pipeline.sources.s3_feed import SqsFeed

_MISSING = {"NoSuchKey", "404", "NotFound"}
FEED_STATE = "\u0000feed"  # the sensor state's mark that ticks read the feed, not a listing


def object_version(etag: str, last_modified) -> str:  # noqa: ANN001 - a datetime
    """An object's version: its ETag, and its LastModified to the second (listings give
    milliseconds, HEAD gives seconds). The ETag alone misses a copy that changes only the
    object's metadata; LastModified alone, a rewrite within one second."""
    return f"{etag.strip(chr(34))}@{int(last_modified.timestamp())}"


def _error_code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", type(error).__name__))


class S3Source(DocumentSource):
    kind = "s3"

    def __init__(
        self,
        client,  # noqa: ANN001
        bucket: str,
        prefix: str = "",
        glob: str = "*",
        feed: "SqsFeed | None" = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.glob = glob
        self.feed = feed  # a change feed: sensor ticks read it instead of listing

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix} ({self.glob})"

    def _wanted(self, key: str) -> bool:
        return not key.endswith("/") and fnmatch.fnmatchcase(key[len(self.prefix) :], self.glob)

    def check(self) -> None:
        """The bucket exists and can be reached (one HEAD request), and so does the change
        feed's queue, if there is one."""
        if self.feed is not None:
            self.feed.check()
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as error:
            code = _error_code(error)
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise SourceUnavailableError(
                    f"source.bucket: bucket {self.bucket!r} does not exist ({self.describe()})"
                ) from None
            raise SourceUnavailableError(
                f"cannot reach {self.describe()}: {code}: {error}", is_transient(error)
            ) from None
        except BotoCoreError as error:
            raise SourceUnavailableError(
                f"cannot reach {self.describe()}: {error}", is_transient(error)
            ) from None

    def list_entries(self) -> Iterator[SourceEntry]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    if self._wanted(obj["Key"]):
                        yield SourceEntry(
                            obj["Key"],
                            object_version(obj["ETag"], obj["LastModified"]),
                            obj.get("Size"),
                            obj["LastModified"].timestamp(),
                        )
        except (BotoCoreError, ClientError) as error:
            raise SourceUnavailableError(
                f"cannot list {self.describe()}: {_error_code(error)}: {error}",
                is_transient(error),
            ) from None

    def entries_for(self, doc_ids: list[str]) -> Iterator[SourceEntry]:
        from botocore.exceptions import BotoCoreError, ClientError

        for key in doc_ids:
            if not key.startswith(self.prefix) or not self._wanted(key):
                continue
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as error:
                if _error_code(error) in _MISSING:
                    continue
                raise SourceUnavailableError(
                    f"cannot reach {self.describe()}: {error}", is_transient(error)
                ) from None
            except BotoCoreError as error:
                raise SourceUnavailableError(
                    f"cannot reach {self.describe()}: {error}", is_transient(error)
                ) from None
            yield SourceEntry(
                key,
                object_version(head["ETag"], head["LastModified"]),
                head.get("ContentLength"),
                head["LastModified"].timestamp(),
            )

    def read(self, doc_id: str) -> RawDocument:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=doc_id)
            return RawDocument(
                response["Body"].read(),
                metadata=dict(response.get("Metadata") or {}),
                version=object_version(response["ETag"], response["LastModified"]),
            )
        except ClientError as error:
            code = _error_code(error)
            if code in _MISSING:
                raise DocumentReadError(f"{doc_id!r} was deleted before it could be read") from None
            raise DocumentReadError(
                f"cannot read s3 object {doc_id!r}: {code}", transient=is_transient(error)
            ) from None
        except BotoCoreError as error:  # no answer (a connection error, a timeout), or none
            # asked (no credentials): either way, nothing about the object
            raise DocumentReadError(
                f"cannot read s3 object {doc_id!r}: {error}", transient=True
            ) from None

    # ------------------------------------------------------------ change detection

    def changes_since(self, state: dict | None) -> ChangeSet:
        """With a change feed: what its messages say changed (no listing). Without one, or on
        a first tick (or a reset, or the first tick since the feed was configured): a listing
        compared with `state`, as for any source."""
        if self.feed is None:
            return super().changes_since(state)
        if not state or not state.get(FEED_STATE):
            listed = super().changes_since(state)
            listed.state = {FEED_STATE: True}
            return listed
        batch = self.feed.read(lambda key: key.startswith(self.prefix) and self._wanted(key))
        return ChangeSet(
            changed=list(batch.changed.values()),
            deleted=sorted(batch.deleted),
            state={FEED_STATE: True},
            receipts=batch.receipts,
            ignorable=batch.ignorable,
        )

    def baseline_state(self) -> dict | None:
        """With a change feed, later looks read the feed, so a first look need not list the
        bucket (a million objects is 1,000 LIST calls, longer than a sensor tick may take)."""
        return {FEED_STATE: True} if self.feed is not None else None

    def acknowledge(self, receipts: list[str]) -> None:
        if self.feed is not None and receipts:
            self.feed.delete(receipts)
