"""Publish sensors and the nightly schedule, evaluated by Dagster and materialised for real."""

import json
import textwrap
from datetime import UTC, datetime

import dagster as dg
import pytest

from batch_pipeline.definitions import build_definitions
from batch_pipeline.sources.filesystem import FilesystemSource
from batch_pipeline.triggers.publish import evaluate_publish
from tests.support import STAGE_ASSETS, index_of, metadata_values, stage_resources, tick

SENSOR_SETTINGS = "sensor: {window_seconds: 0, max_docs_per_run: 50}\n"


def sensor_config(workspace, source: str, name="handbook"):
    workspace["config"].write_text(
        f"collections:\n  - name: {name}\n    source: {source}\n" + SENSOR_SETTINGS
    )
    return build_definitions(workspace["config"])


def run(defs, workspace, instance, request):
    result = dg.materialize(
        [defs.get_assets_def(n) for n in STAGE_ASSETS],
        partition_key=request.partition_key,
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources=stage_resources(workspace, fake_model=True),
    )
    assert result.success
    return result


def rows_by_doc(workspace, name="handbook"):
    import lancedb

    table = lancedb.connect(str(workspace["home"] / "lancedb")).open_table(
        index_of(workspace["config"], name)
    )
    out = {}
    for row in (
        table.search().select(["doc_id", "chunk_id", "run_id", "embedded_at"]).limit(None).to_list()
    ):
        out.setdefault(row["doc_id"], set()).add(
            (row["chunk_id"], row["run_id"], row["embedded_at"])
        )
    return out


def one_document_folder(tmp_path):  # noqa: ANN001, ANN201
    """A folder source holding a.md, and a sensor state folder: for the decision functions."""
    from batch_pipeline.state.staging import as_stage_path
    from batch_pipeline.triggers.publish import StateSnapshots

    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("first")
    return root, FilesystemSource(root, "*.md"), StateSnapshots(as_stage_path(tmp_path / "state"))


def collect_meta(result):
    (event,) = result.asset_materializations_for_node("source_documents")
    return metadata_values(event.metadata)


def test_filesystem_sensor_embeds_only_what_changed(workspace):
    defs = sensor_config(workspace, '{kind: filesystem, path: docs, glob: "**/*"}')
    with dg.instance_for_test() as instance:
        first = tick(defs, workspace, instance)
        (full,) = first.run_requests
        assert full.partition_key == "handbook"
        assert full.run_config["ops"]["source_documents"]["config"]["changed_doc_ids"] == []
        run(defs, workspace, instance, full)
        before = rows_by_doc(workspace)

        quiet = tick(defs, workspace, instance, first.cursor)
        assert not quiet.run_requests and "no source changes" in quiet.skip_reason.skip_message

        docs = workspace["docs"]
        path = docs / "account" / "reset-password.md"
        path.write_text(path.read_text().replace("30 minutes", "one hour"))
        (docs / "refunds.md").unlink()
        (docs / "new-page.md").write_text("# Shipping\n\nWe ship worldwide within five days.\n")
        changed = tick(defs, workspace, instance, quiet.cursor)
        (request,) = changed.run_requests
        config = request.run_config["ops"]["source_documents"]["config"]
        assert config == {
            "changed_doc_ids": ["account/reset-password.md", "new-page.md"],
            "deleted_doc_ids": ["refunds.md"],
        }
        again = tick(defs, workspace, instance, quiet.cursor)  # a repeated tick
        assert again.run_requests[0].run_key == request.run_key

        result = run(defs, workspace, instance, request)
        meta = collect_meta(result)
        assert meta["mode"] == "targeted" and meta["targeted_doc_ids"] == 3
        assert meta["documents_unchanged"] == 0  # nothing else was listed or read
        after = rows_by_doc(workspace)
        assert "refunds.md" not in after
        assert after["notes.txt"] == before["notes.txt"]  # untouched: same run id and time
        assert {r for _, r, _ in after["new-page.md"]} == {result.run_id}
        new_runs = {r for _, r, _ in after["account/reset-password.md"]}
        assert result.run_id in new_runs


def test_the_source_state_lives_in_staging_and_the_cursor_stays_small(workspace):
    docs = workspace["docs"]
    for n in range(300):
        (docs / f"page-{n:03d}.md").write_text(f"# Page {n}\n\nBody {n}.\n")
    defs = sensor_config(workspace, '{kind: filesystem, path: docs, glob: "**/*"}')
    snapshots = workspace["home"] / "staging" / "sensor-state" / "handbook"
    with dg.instance_for_test() as instance:
        first = tick(defs, workspace, instance)
        assert len(first.run_requests) == 1 and len(first.cursor) < 160  # was 13 KB at 100 docs
        # a digest, a counter, and when the source was last looked at
        assert set(json.loads(first.cursor)) == {"v", "ref", "n", "listed"}
        (docs / "page-007.md").write_text("# Page 7\n\nRewritten.\n")
        (docs / "page-008.md").unlink()
        changed = tick(defs, workspace, instance, first.cursor)
        (request,) = changed.run_requests
        assert request.run_config["ops"]["source_documents"]["config"] == {
            "changed_doc_ids": ["page-007.md"],
            "deleted_doc_ids": ["page-008.md"],
        }
        assert len(list(snapshots.iterdir())) == 2  # the new state and the one before it
        quiet = tick(defs, workspace, instance, changed.cursor)
        assert not quiet.run_requests
        assert len(list(snapshots.iterdir())) == 1  # the cursor moved on: the older one went

        for path in snapshots.iterdir():  # a lost snapshot: start over, like a bad cursor
            path.unlink()
        reset = tick(defs, workspace, instance, quiet.cursor)
        (full,) = reset.run_requests
        assert full.run_config["ops"]["source_documents"]["config"]["changed_doc_ids"] == []


def test_a_vanished_source_folder_fails_the_tick_naming_the_setting(workspace):
    """An unmounted volume: the tick fails with the config field and the path, and no run is
    requested (the cursor stays where it was, as the tick did not complete)."""
    defs = sensor_config(workspace, "{kind: filesystem, path: docs}")
    with dg.instance_for_test() as instance:
        tick(defs, workspace, instance)
        workspace["docs"].rename(workspace["root"] / "moved-away")
        with pytest.raises(dg.DagsterResourceFunctionError) as raised:
            tick(defs, workspace, instance)
        cause = str(raised.value.__cause__)  # what the tick's error shows under the wrapper
        assert "collections[0].source.path: folder not found: " in cause
        assert str(workspace["docs"]) in cause


def test_an_unreadable_cursor_resets_to_a_full_reconciliation(workspace):
    defs = sensor_config(workspace, "{kind: filesystem, path: docs}")
    with dg.instance_for_test() as instance:
        for cursor in ("{not json", json.dumps({"v": 0, "files": {}}), "[]"):
            result = tick(defs, workspace, instance, cursor)
            (request,) = result.run_requests
            assert request.run_config["ops"]["source_documents"]["config"]["changed_doc_ids"] == []
            assert json.loads(result.cursor)["v"] == 2


def test_a_start_over_on_an_unchanged_listing_gets_a_new_full_run_key(tmp_path):
    """Tracking lost (or wiped) after a full run, the sensor starts over on the same listing:
    its full run needs a run key Dagster has not launched for this sensor, or the daemon would
    skip it and nothing would land again. One tick evaluated twice keeps its key."""
    root, source, snapshots = one_document_folder(tmp_path)

    def start_over(now: float) -> str:
        decision = evaluate_publish(
            "kb", source, None, now=now, window_seconds=0, max_docs=10, snapshots=snapshots
        )
        (run,) = decision.runs
        assert run.full
        return run.run_key

    first = start_over(1000.0)
    assert start_over(1000.0) == first  # the same tick again
    assert start_over(5000.0) != first  # a later start over, on the same listing


def test_changes_within_the_window_go_into_one_capped_set_of_runs(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    source = FilesystemSource(root, "*.md")
    start = evaluate_publish("kb", source, None, now=1000.0, window_seconds=30, max_docs=2)
    for i in range(3):
        (root / f"{i}.md").write_text(f"doc {i}")
    waiting = evaluate_publish(
        "kb", source, start.cursor, now=1010.0, window_seconds=30, max_docs=5
    )
    assert not waiting.runs
    assert waiting.skip_reason == (
        "3 changed documents waiting for the 30 s batching window; "
        "the run starts on the first tick after 30.0 s"
    )
    assert set(waiting.pending_changes) == {"0.md", "1.md", "2.md"}
    (root / "3.md").write_text("doc 3")
    still = evaluate_publish(
        "kb", source, waiting.cursor, now=1030.0, window_seconds=30, max_docs=5
    )
    assert not still.runs  # the window counts from the first pending change (t=1010)
    due = evaluate_publish("kb", source, still.cursor, now=1041.0, window_seconds=30, max_docs=3)
    assert [r.changed_doc_ids for r in due.runs] == [["0.md", "1.md", "2.md"], ["3.md"]]
    assert len({r.run_key for r in due.runs}) == 2
    assert json.loads(due.cursor)["pending"] == {}


def test_pending_changes_show_as_lag(workspace, make_pipeline):
    from batch_pipeline.health.freshness import partition_freshness

    pipeline = make_pipeline()
    source = pipeline.source
    first = evaluate_publish("handbook", source, None, now=0, window_seconds=30, max_docs=10)
    (workspace["docs"] / "late.md").write_text("# Late\n\nnews")
    later = evaluate_publish(
        "handbook", source, first.cursor, now=5, window_seconds=30, max_docs=10
    )
    pipeline.tracking.record_pending(pipeline.index, later.pending_changes)
    fresh = partition_freshness(pipeline.tracking, pipeline.index)
    assert fresh["pending_documents"] == 1
    assert fresh["lag_seconds"] >= 0 and fresh["oldest_source_change_pending"]


def test_s3_sensor_targets_changed_objects(workspace, s3_bucket, moto_server):
    client, bucket = s3_bucket
    client.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# Alpha\n\nThe first article.")
    client.put_object(Bucket=bucket, Key="kb/b.md", Body=b"# Beta\n\nThe second article.")
    defs = sensor_config(
        workspace,
        f"{{kind: s3, bucket: {bucket}, prefix: kb/, glob: '*.md', endpoint_url: '{moto_server}'}}",
    )
    with dg.instance_for_test() as instance:  # definitions resolve against an instance
        # the only sensor that asks Dagster for the S3 resource (a boto3 client on every tick)
        assert defs.get_sensor_def("handbook_publish_sensor").required_resource_keys == {
            "pipeline",
            "s3",
        }
        first = tick(defs, workspace, instance)
        run(defs, workspace, instance, first.run_requests[0])
        before = rows_by_doc(workspace)
        assert set(before) == {"kb/a.md", "kb/b.md"}
        client.put_object(Bucket=bucket, Key="kb/b.md", Body=b"# Beta\n\nEdited.")
        result = tick(defs, workspace, instance, first.cursor)
        (request,) = result.run_requests
        assert request.run_config["ops"]["source_documents"]["config"]["changed_doc_ids"] == [
            "kb/b.md"
        ]
        run(defs, workspace, instance, request)
        after = rows_by_doc(workspace)
        assert after["kb/a.md"] == before["kb/a.md"]
        assert after["kb/b.md"] != before["kb/b.md"]


def test_sql_sensor_targets_changed_rows(workspace, sql_table):
    url, name, engine, table = sql_table
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [
                {
                    "id": 1,
                    "title": "Refunds",
                    "body": "Annual plans are refunded.",
                    "updated_at": t0,
                    "deleted": False,
                },
                {
                    "id": 2,
                    "title": "Shipping",
                    "body": "We ship in five days.",
                    "updated_at": t0,
                    "deleted": False,
                },
                {"id": 3, "title": "Broken", "body": None, "updated_at": t0, "deleted": False},
            ],
        )
    defs = sensor_config(
        workspace,
        f"{{kind: sql, url: '{url}', table: {name}, deleted_column: deleted, format: markdown}}",
    )
    with dg.instance_for_test() as instance:
        first = tick(defs, workspace, instance)
        result = run(defs, workspace, instance, first.run_requests[0])
        assert collect_meta(result)["documents_failed"] == 1  # the NULL body, recorded
        before = rows_by_doc(workspace)
        assert set(before) == {"1", "2"}
        with engine.begin() as conn:
            conn.execute(
                table.update()
                .where(table.c.id == 2)
                .values(body="We ship in three days.", updated_at=datetime(2026, 11, 2, tzinfo=UTC))
            )
            conn.execute(
                table.update()
                .where(table.c.id == 1)
                .values(deleted=True, updated_at=datetime(2026, 11, 2, tzinfo=UTC))
            )
        changed = tick(defs, workspace, instance, first.cursor)
        (request,) = changed.run_requests
        config = request.run_config["ops"]["source_documents"]["config"]
        assert config == {"changed_doc_ids": ["2"], "deleted_doc_ids": ["1"]}
        run(defs, workspace, instance, request)
        after = rows_by_doc(workspace)
        assert set(after) == {"2"}
        assert after["2"] != before["2"]


def test_nightly_schedule_reconciles_every_partition_and_compacts(workspace):
    workspace["config"].write_text(
        textwrap.dedent("""\
        collections:
          - name: handbook
            source: {kind: filesystem, path: docs, glob: "**/*"}
        schedule: {cron: "30 3 * * *", timezone: Europe/Berlin}
        maintenance: {version_retention_hours: 0}
        """)
    )
    defs = build_definitions(workspace["config"])
    schedule = defs.get_schedule_def("nightly_reconciliation")
    assert schedule.cron_schedule == "30 3 * * *"
    assert schedule.execution_timezone == "Europe/Berlin"
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 11, 30, 2, 30, tzinfo=UTC)
        )
        (request,) = list(schedule(context))
        assert request.partition_key == "handbook"
        assert request.tags["batch_pipeline/mode"] == "reconcile"
        run(defs, workspace, instance, request)
        (workspace["docs"] / "refunds.md").unlink()
        result = run(defs, workspace, instance, request)
        (event,) = result.asset_materializations_for_node("vector_index")
        meta = metadata_values(event.metadata)
        assert meta["documents_deleted"] == 1
        assert meta["maintenance_versions_after"] < meta["maintenance_versions_before"]
        assert meta["maintenance_fragments_after"] <= meta["maintenance_fragments_before"]


@pytest.mark.parametrize("bad", ["0 2 * *", "not a cron at all"])
def test_a_bad_cron_names_the_field(tmp_path, bad):
    from batch_pipeline.config import ConfigError, load_config

    path = tmp_path / "p.yaml"
    collections = "collections: [{name: kb, source: {kind: filesystem, path: d}}]\n"
    path.write_text(collections + f"schedule: {{cron: '{bad}'}}\n")
    with pytest.raises(ConfigError, match=r"schedule.cron: cron must have five fields"):
        load_config(path)


def test_the_window_counts_from_the_change_not_from_its_detection(tmp_path):
    """The issue's timeline with the defaults (window 30 s): an edit at t0, seen at +12.6 s.
    The run waited for 30 s after it was seen; now it starts on the first tick past t0 + 30 s
    (with a tick every 15 s: at +42.6 s instead of +57.6 s)."""
    import os

    root, source, snapshots = one_document_folder(tmp_path)
    t0 = 1_900_000_000.0

    def tick_at(offset: float, cursor: str | None):
        return evaluate_publish("kb", source, cursor, t0 + offset, 30, 200, snapshots)

    start = tick_at(-60, None)
    (root / "a.md").write_text("edited")
    os.utime(root / "a.md", (t0, t0))
    seen = tick_at(12.6, start.cursor)
    assert not seen.runs
    assert seen.skip_reason.startswith("1 changed document waiting")  # was "documents ... 0s"
    assert seen.skip_reason.endswith("after 17.4 s")
    early = tick_at(27.6, seen.cursor)
    assert not early.runs and early.skip_reason.endswith("after 2.4 s")
    due = tick_at(31.0, early.cursor)  # the first tick past t0 + 30 s launches the run
    assert [r.changed_doc_ids for r in due.runs] == [["a.md"]]
    for decision in (start, seen, early, due):
        assert len(decision.cursor) < 160


def test_an_older_cursor_with_its_state_inline_is_read_not_reset(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("one")
    source = FilesystemSource(root, "*.md")
    state = source.changes_since(None).state
    old = json.dumps({"v": 1, "state": state, "pending": {}})
    decision = evaluate_publish("kb", source, old, now=2e9, window_seconds=0, max_docs=10)
    assert not decision.runs and not decision.cursor_reset
    assert decision.skip_reason == "no source changes"


def test_on_first_start_the_sensor_builds_on_what_tracking_has_landed(workspace):
    """With the index already built (make demo), a fresh sensor launches no full pass: only
    what changed since the last landing."""
    defs = sensor_config(workspace, '{kind: filesystem, path: docs, glob: "**/*"}')
    with dg.instance_for_test() as instance:
        from tests.support import materialize

        assert materialize(workspace, instance, fake_model=True).success
        fresh = tick(defs, workspace, instance)  # no cursor: the first tick of a new sensor
        assert not fresh.run_requests  # it launched a full reconciliation run before
        assert fresh.skip_reason.skip_message == "no source changes"

        (workspace["docs"] / "refunds.md").write_text("# Refunds\n\nNow within 60 days.\n")
        (workspace["docs"] / "notes.txt").unlink()
        again = tick(defs, workspace, instance)  # a reset sensor, after changes
        (request,) = again.run_requests
        assert request.run_config["ops"]["source_documents"]["config"] == {
            "changed_doc_ids": ["refunds.md"],
            "deleted_doc_ids": ["notes.txt"],
        }


def test_a_tick_skips_without_looking_until_the_interval_or_the_window_ends(tmp_path):
    """Looking at the source and launching are timed apart: between looks (every
    interval_seconds) a tick decides from the cursor alone, and it looks again as soon as a
    waiting batch is due, so the run starts within a tick of its window closing."""
    import os

    from batch_pipeline.triggers.publish import skip_without_looking

    root, source, snapshots = one_document_folder(tmp_path)
    t0 = 1_900_000_000.0
    start = evaluate_publish("kb", source, None, t0 - 60, 30, 200, snapshots)

    quiet = skip_without_looking(start.cursor, t0 - 55, interval_seconds=15)
    assert quiet == "no source changes at the last look, 5 s ago; the next look is in 10 s"
    assert skip_without_looking(start.cursor, t0 - 45.5, 15) is None  # a look is due

    (root / "a.md").write_text("edited")
    os.utime(root / "a.md", (t0, t0))
    seen = evaluate_publish("kb", source, start.cursor, t0 + 12.6, 30, 200, snapshots)
    assert not seen.runs and json.loads(seen.cursor)["due"] == t0 + 30
    waiting = skip_without_looking(seen.cursor, t0 + 17.6, interval_seconds=60)
    assert waiting == (
        "1 changed document waiting for the batching window; "
        "the run starts on the first tick after 12.4 s"
    )
    # the window closes long before the next look would: the first tick past it looks
    assert skip_without_looking(seen.cursor, t0 + 29.9, 60) is not None
    assert skip_without_looking(seen.cursor, t0 + 30.0, 60) is None
    due = evaluate_publish("kb", source, seen.cursor, t0 + 30.0, 30, 200, snapshots)
    assert [r.changed_doc_ids for r in due.runs] == [["a.md"]]
    assert "due" not in json.loads(due.cursor)

    for unreadable in (None, "", "{not json", json.dumps({"v": 1, "state": {}, "pending": {}})):
        assert skip_without_looking(unreadable, t0, 15) is None  # look, and start over


def test_a_tick_between_looks_does_not_touch_the_source(workspace):
    """The sensor ticks every evaluation of the daemon, but between looks it reads nothing:
    an edit right after a look waits for the next look."""
    defs = sensor_config(workspace, '{kind: filesystem, path: docs, glob: "**/*"}')
    with dg.instance_for_test() as instance:  # definitions resolve against an instance
        sensor = defs.get_sensor_def("handbook_publish_sensor")
        assert sensor.minimum_interval_seconds == 1
        assert sensor.required_resource_keys == {"pipeline"}  # no S3 client built for a folder
        first = tick(defs, workspace, instance)
        (workspace["docs"] / "refunds.md").write_text("# Refunds\n\nNow within 60 days.\n")
        between = tick(defs, workspace, instance, first.cursor, look=False)
        assert not between.run_requests and between.cursor is None  # the cursor stays
        assert between.skip_reason.skip_message.startswith("no source changes at the last look")
        looked = tick(defs, workspace, instance, first.cursor)  # the next look sees the edit
        (request,) = looked.run_requests
        assert request.run_config["ops"]["source_documents"]["config"]["changed_doc_ids"] == [
            "refunds.md"
        ]
