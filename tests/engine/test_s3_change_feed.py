"""The S3 change feed on moto's server: real bucket notifications into a real SQS queue. A tick
reads the queue instead of listing the bucket, and a message is deleted only on the tick after
the run request that carries its change went into the cursor."""

import uuid

import boto3
import pytest

from batch_pipeline.config import parse_config
from batch_pipeline.sources import make_source
from batch_pipeline.triggers.publish import evaluate_publish


@pytest.fixture()
def feed(moto_server, tmp_path):
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    bucket = f"feed-{uuid.uuid4().hex[:12]}"
    queue = sqs.create_queue(QueueName=bucket)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": arn["QueueArn"],
                    "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
                }
            ]
        },
    )
    config = parse_config(
        {
            "collections": [
                {
                    "name": "kb",
                    "source": {
                        "kind": "s3",
                        "bucket": bucket,
                        "prefix": "kb/",
                        "glob": "*.md",
                        "endpoint_url": moto_server,
                        "region": "us-east-1",
                        "notifications": {"sqs_queue_url": queue},
                    },
                }
            ]
        },
        base_dir=tmp_path,
    )
    source = make_source(config.collections[0].source)
    lists = []
    source.client.meta.events.register("before-call.s3.ListObjectsV2", lambda **_: lists.append(1))
    return s3, sqs, bucket, queue, source, lists


def in_queue(sqs, queue) -> int:  # noqa: ANN001
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=names)["Attributes"]
    return sum(int(attributes[n]) for n in names)


def tick(source, cursor, now):  # noqa: ANN001, ANN201
    return evaluate_publish("kb", source, cursor, now=now, window_seconds=30, max_docs=200)


def test_ticks_read_the_feed_not_the_bucket_and_acknowledge_after_the_run_request(feed):
    s3, sqs, bucket, queue, source, lists = feed
    s3.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n\nFirst.\n")
    first = tick(source, None, now=1000.0)  # a first tick: a full run, which lists
    assert len(first.runs) == 1 and first.runs[0].full
    assert lists == []  # the tick itself lists nothing: a big bucket cannot time it out

    lists.clear()
    s3.put_object(Bucket=bucket, Key="kb/b.md", Body=b"# B\n\nSecond.\n")
    s3.delete_object(Bucket=bucket, Key="kb/a.md")
    s3.put_object(Bucket=bucket, Key="elsewhere/c.md", Body=b"# C\n")  # outside the prefix
    waiting = tick(source, first.cursor, now=1001.0)
    assert not waiting.runs and "waiting for the 30 s batching window" in waiting.skip_reason
    assert set(waiting.pending_changes) == {"kb/a.md", "kb/b.md"}
    assert in_queue(sqs, queue) >= 3  # read, hidden, not deleted: their changes still wait

    due = tick(source, waiting.cursor, now=1040.0)
    (run,) = due.runs
    assert run.changed_doc_ids == ["kb/b.md"] and run.deleted_doc_ids == ["kb/a.md"]
    assert in_queue(sqs, queue) >= 2  # the run request is not in a committed cursor yet

    after = tick(source, due.cursor, now=1041.0)  # that cursor was committed: acknowledge
    assert not after.runs and after.skip_reason == "no source changes"
    assert in_queue(sqs, queue) == 0
    assert lists == []  # not one listing since the first tick


def test_a_repeated_change_makes_the_same_run_key(feed):
    s3, _, bucket, _, source, _ = feed
    s3.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n")
    first = tick(source, None, now=1000.0)
    s3.put_object(Bucket=bucket, Key="kb/b.md", Body=b"# B\n")
    waiting = tick(source, first.cursor, now=1001.0)
    due = tick(source, waiting.cursor, now=1040.0)
    # the same change seen again (a message delivered twice) plans the same run key
    again = tick(source, waiting.cursor, now=1040.0)
    assert [r.run_key for r in due.runs] == [r.run_key for r in again.runs]


def test_a_feed_full_run_after_a_start_over_has_a_new_run_key(feed):
    """A change feed's state is the same at every start: the full run's key names the tick's
    time, so a sensor that starts over (tracking lost) gets a run Dagster launches."""
    s3, _, bucket, _, source, _ = feed
    s3.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n")
    (first,) = tick(source, None, now=1000.0).runs
    (again,) = tick(source, None, now=1000.0).runs
    (later,) = tick(source, None, now=9000.0).runs
    assert first.full and later.full
    assert again.run_key == first.run_key and later.run_key != first.run_key


def test_an_unreachable_queue_skips_and_keeps_the_cursor(feed, moto_server):
    s3, sqs, bucket, queue, source, _ = feed
    s3.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n")
    first = tick(source, None, now=1000.0)
    sqs.delete_queue(QueueUrl=queue)
    broken = tick(source, first.cursor, now=1001.0)
    assert broken.cursor == first.cursor and "source unavailable" in broken.skip_reason
    assert "change feed" in broken.skip_reason
    with pytest.raises(Exception, match="source.notifications.sqs_queue_url: cannot reach"):
        source.check()  # a run checks it before reading anything


def test_a_first_tick_with_a_queue_gone_skips_without_a_run(feed):
    _, sqs, _, queue, source, _ = feed
    sqs.delete_queue(QueueUrl=queue)
    reads = []  # tracking's landed versions: not read for a source that did not answer
    first = evaluate_publish(
        "kb", source, None, 1000.0, 30, 200, landed=lambda: reads.append(1) or iter(())
    )
    assert first.runs == [] and first.cursor is None
    assert "source unavailable" in first.skip_reason and "sqs_queue_url" in first.skip_reason
    assert reads == []


def test_a_reset_that_tracking_knows_lists_once_for_what_differs(feed):
    """With landed documents, a lost cursor is not a full run: one listing, compared with
    what tracking landed, requests only what differs."""
    s3, _, bucket, _, source, lists = feed
    s3.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n")
    s3.put_object(Bucket=bucket, Key="kb/b.md", Body=b"# B\n")
    landed = {e.doc_id: e.version for e in source.list_entries() if e.doc_id == "kb/a.md"}
    lists.clear()
    reset = evaluate_publish(
        "kb", source, None, now=1000.0, window_seconds=0, max_docs=200, landed=landed.items
    )
    (run,) = reset.runs
    assert not run.full and run.changed_doc_ids == ["kb/b.md"]
    assert lists  # listed once, in this tick


def test_a_reset_whose_listing_outlasts_its_time_requests_the_full_run(feed):
    """A bucket too big to list within a tick (Dagster times a tick out at 60 s): the reset
    stops listing after LOOK_SECONDS and requests the full run, which lists."""
    from itertools import count

    from batch_pipeline.sources.base import LOOK_SECONDS

    s3, _, bucket, _, source, _ = feed
    for name in "abc":
        s3.put_object(Bucket=bucket, Key=f"kb/{name}.md", Body=b"# doc\n")
    landed = {"kb/a.md": "an older version"}
    seconds = count(0.0, LOOK_SECONDS * 0.75)  # each look at the clock: 15 s later
    reset = evaluate_publish(
        "kb",
        source,
        None,
        now=1000.0,
        window_seconds=0,
        max_docs=200,
        landed=landed.items,
        clock=lambda: next(seconds),
    )
    (run,) = reset.runs
    assert run.full
    # the clock was read three times: at the start, at kb/a.md (15 s) and at kb/b.md (30 s, past
    # the budget), where the listing stopped, before kb/c.md
    assert next(seconds) == LOOK_SECONDS * 0.75 * 3
