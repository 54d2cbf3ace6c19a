"""An S3 change feed: the bucket's event notifications, delivered to an SQS queue.

With a feed, a sensor tick reads the queue (a few calls per ten changes) instead of listing
the bucket (one call per thousand objects, every tick). A message is not deleted when it is
read: it stays hidden (`visibility_timeout_seconds`) while its change waits for the batching
window, and is deleted on the tick after the run request that carries its change went into a
committed cursor. A message that reappears (the sensor stopped, a tick failed) brings the same
change again, which makes the same run key, so nothing runs twice. Whatever the feed misses
(a queue purged, notifications switched off) the nightly reconciliation finds: it lists the
bucket in full.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import unquote_plus

from batch_pipeline.sources.base import SourceEntry, SourceUnavailableError
from batch_pipeline.transient import is_transient

CREATED, REMOVED = "ObjectCreated", "ObjectRemoved"


@dataclass
class FeedBatch:
    """What one read of the queue brought: changes with the messages that carry them."""

    changed: dict[str, SourceEntry] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)  # key -> when
    receipts: dict[str, list[str]] = field(default_factory=dict)  # key -> receipt handles
    ignorable: list[str] = field(default_factory=list)  # receipts carrying nothing wanted


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def parse_records(body: str) -> list[tuple[str, str, str, float, int | None]]:
    """(event kind, key, etag, time, size) of each S3 record in a message body; [] for test
    events and anything else."""
    try:
        records = json.loads(body).get("Records") or []
    except (ValueError, AttributeError):
        return []
    found = []
    for record in records:
        name = str(record.get("eventName", ""))
        s3 = record.get("s3") or {}
        obj = s3.get("object") or {}
        if not obj.get("key") or not name.startswith((CREATED, REMOVED)):
            continue
        kind = CREATED if name.startswith(CREATED) else REMOVED
        when = _epoch(record["eventTime"]) if record.get("eventTime") else 0.0
        etag = str(obj.get("eTag") or obj.get("sequencer") or "")
        found.append((kind, unquote_plus(obj["key"]), etag, when, obj.get("size")))
    return found


class SqsFeed:
    def __init__(
        self,
        client,  # noqa: ANN001 - a boto3 SQS client
        queue_url: str,
        visibility_timeout: int = 600,
        max_messages: int = 1000,
    ) -> None:
        self.client = client
        self.queue_url = queue_url
        self.visibility_timeout = visibility_timeout
        self.max_messages = max_messages

    def check(self) -> None:
        """The queue exists and can be reached (one call)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
        except (BotoCoreError, ClientError) as error:
            raise SourceUnavailableError(
                f"source.notifications.sqs_queue_url: cannot reach the queue {self.queue_url}: "
                f"{error}",
                is_transient(error),
            ) from None

    def read(self, wanted: Callable[[str], bool]) -> FeedBatch:
        """Up to `max_messages` messages, newest change per key winning."""
        from botocore.exceptions import BotoCoreError, ClientError

        batch = FeedBatch()
        latest: dict[str, float] = {}
        read = 0
        try:
            while read < self.max_messages:
                response = self.client.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=min(10, self.max_messages - read),
                    VisibilityTimeout=self.visibility_timeout,
                    WaitTimeSeconds=0,
                )
                messages = response.get("Messages") or []
                if not messages:
                    break
                read += len(messages)
                for message in messages:
                    self._add(batch, latest, message, wanted)
        except (BotoCoreError, ClientError) as error:
            raise SourceUnavailableError(
                f"cannot read the change feed {self.queue_url}: {error}", is_transient(error)
            ) from None
        return batch

    @staticmethod
    def _add(batch: FeedBatch, latest: dict, message: dict, wanted) -> None:  # noqa: ANN001
        receipt = message["ReceiptHandle"]
        records = [r for r in parse_records(message.get("Body", "")) if wanted(r[1])]
        if not records:
            batch.ignorable.append(receipt)
            return
        for kind, key, etag, when, size in records:
            batch.receipts.setdefault(key, []).append(receipt)
            if when < latest.get(key, float("-inf")):
                continue  # an older event than one already read for this key
            latest[key] = when
            if kind == CREATED:
                batch.changed[key] = SourceEntry(key, etag, size, when or None)
                batch.deleted.pop(key, None)
            else:
                batch.deleted[key] = when
                batch.changed.pop(key, None)

    def delete(self, receipts: list[str]) -> None:
        """Delete these messages (ten to a call); ones already gone are fine."""
        from botocore.exceptions import BotoCoreError, ClientError

        unique = list(dict.fromkeys(receipts))
        try:
            for start in range(0, len(unique), 10):
                self.client.delete_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[
                        {"Id": str(n), "ReceiptHandle": handle}
                        for n, handle in enumerate(unique[start : start + 10])
                    ],
                )
        except (BotoCoreError, ClientError) as error:
            raise SourceUnavailableError(
                f"cannot acknowledge the change feed {self.queue_url}: {error}",
                is_transient(error),
            ) from None
