"""Sensor tick time with and without the S3 change feed, on moto's server.

    python benchmarks/feed_tick.py [--objects 200000] [--changes 10]

Fills a bucket (on a local moto server) with N small objects under a prefix, with the bucket's
event notifications going to an SQS queue; then times the publish sensor's tick logic
(`evaluate_publish`): the first tick, which requests the full run (without a feed it lists the
bucket for the state later ticks compare with; with the feed it lists nothing), and then a tick
with the same `changes` edits pending: (a) without a feed, which lists the whole bucket and
compares it with the previous tick's state, and (b) with the feed, which reads the queue; and
a reset that tracking knows (every object landed, the cursor lost), which with the feed lists
for at most `LOOK_SECONDS` and past it requests the full run. It counts S3 LIST and
SQS calls. Moto answers on loopback, so the times are lower bounds for real S3, where each LIST
call is a network round trip.
"""

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from batch_pipeline.config import parse_config  # noqa: E402
from batch_pipeline.sources import make_source  # noqa: E402
from batch_pipeline.triggers.publish import evaluate_publish  # noqa: E402
from tests.support import moto_server  # noqa: E402


def source_for(bucket: str, endpoint: str, queue: str | None):  # noqa: ANN201
    spec = {"kind": "s3", "bucket": bucket, "prefix": "kb/", "endpoint_url": endpoint}
    if queue:
        spec["notifications"] = {"sqs_queue_url": queue, "max_messages_per_tick": 1000}
    config = parse_config({"collections": [{"name": "kb", "source": spec}]}, base_dir=REPO)
    return make_source(config.collections[0].source)


def counted(source, calls: dict) -> None:  # noqa: ANN001
    def count(event_name: str, **_: object) -> None:
        calls[event_name] = calls.get(event_name, 0) + 1

    source.client.meta.events.register("before-call.s3.ListObjectsV2", count)
    if getattr(source, "feed", None) is not None:
        source.feed.client.meta.events.register("before-call.sqs.*", count)


def main() -> int:
    import boto3

    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()
    os.environ.update(
        AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1"
    )
    with moto_server() as endpoint:
        s3 = boto3.client("s3", endpoint_url=endpoint)
        sqs = boto3.client("sqs", endpoint_url=endpoint)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        started = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda n: s3.put_object(Bucket=bucket, Key=f"kb/doc-{n:07d}.md", Body=b"x"),
                    range(args.objects),
                )
            )
        filled = time.perf_counter() - started
        queue = sqs.create_queue(QueueName=bucket)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
        s3.put_bucket_notification_configuration(
            Bucket=bucket,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"QueueArn": arn["Attributes"]["QueueArn"], "Events": ["s3:ObjectCreated:*"]}
                ]
            },
        )
        sqs.purge_queue(QueueUrl=queue)  # the test event
        # the state a previous tick left: a listing (no feed) or the feed's mark (feed)
        plain, fed = source_for(bucket, endpoint, None), source_for(bucket, endpoint, queue)
        first, cursors = {}, {}
        for name, source in (("listing", plain), ("feed", fed)):
            calls: dict = {}
            counted(source, calls)
            t0 = time.perf_counter()
            cursors[name] = evaluate_publish("kb", source, None, time.time(), 30, 10_000).cursor
            seconds = round(time.perf_counter() - t0, 3)
            first[name] = {"tick_seconds": seconds, "calls": dict(calls)}  # this tick's calls
        for n in range(args.changes):
            s3.put_object(Bucket=bucket, Key=f"kb/doc-{n:07d}.md", Body=b"edited")
        results = {}
        for name, source in (("listing", plain), ("feed", fed)):
            calls = {}
            counted(source, calls)
            cursor = cursors[name]
            t0 = time.perf_counter()
            decision = evaluate_publish("kb", source, cursor, time.time(), 30, 10_000)
            seconds = time.perf_counter() - t0
            results[name] = {
                "tick_seconds": round(seconds, 3),
                "changes_found": len(decision.pending_changes),
                "calls": dict(calls),
            }
        # a reset that tracking knows (every object landed, a lost cursor): with the feed, it
        # lists for at most LOOK_SECONDS, else it requests the full run
        calls = {}
        counted(fed, calls)
        landed = {e.doc_id: e.version for e in plain.list_entries()}
        t0 = time.perf_counter()
        decision = evaluate_publish("kb", fed, None, time.time(), 30, 10_000, landed=landed.items)
        full = bool(decision.runs) and decision.runs[0].full
        reset = {
            "tick_seconds": round(time.perf_counter() - t0, 3),
            "requested": "the full run" if full else f"{len(decision.pending_changes)} changes",
            "calls": dict(calls),
        }
        report = {
            "objects": args.objects,
            "fill_seconds": round(filled, 1),
            "first_tick": first,
            **results,
            "reset_known_feed": reset,
        }
        print(
            f"first tick (a full run requested): without a feed "
            f"{first['listing']['tick_seconds']} s ({first['listing']['calls']}), with the "
            f"feed {first['feed']['tick_seconds']} s ({first['feed']['calls']})"
        )
        print(
            f"{args.objects} objects, {args.changes} changed: tick without a feed "
            f"{results['listing']['tick_seconds']} s ({results['listing']['calls']}), with the "
            f"feed {results['feed']['tick_seconds']} s ({results['feed']['calls']})"
        )
        print(
            f"a reset that tracking knows, with the feed: {reset['tick_seconds']} s, "
            f"requested {reset['requested']} ({reset['calls']})"
        )
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
