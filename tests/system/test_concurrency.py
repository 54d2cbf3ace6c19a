"""Two runs on one partition at once, on SQLite and PostgreSQL; bounded table maintenance."""

import json
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from batch_pipeline.names import generation_index
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import FailureRecord, LockTimeoutError, TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import POSTGRES_URL, cli_command, index_of, many_articles, pipeline_env


@pytest.fixture(params=["sqlite", "postgresql"])
def tracking_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'home' / 'tracking.db'}"
        return
    schema = f"tracking_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(POSTGRES_URL)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    engine.dispose()


def test_two_concurrent_runs_on_one_partition_leave_a_consistent_index(tmp_path, tracking_url):
    many_articles(tmp_path / "docs")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: handbook\n    source: {kind: filesystem, path: docs}\n"
    )
    home = tmp_path / "home"
    env = pipeline_env(config, home, BATCH_PIPELINE_TRACKING_URL=tracking_url)
    command = cli_command("run", "--collection", "handbook", "--max-batch-size", "16", "--json")
    runs = [
        subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    reports, errors = [], []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
        reports.append(json.loads(out))
        errors.append(err)
    # the second run waited for the first, then found nothing stale: nothing embedded twice
    embedded = sorted(r["execute"]["inputs_embedded"] for r in reports)
    written = sorted(r["land"]["chunks_written"] for r in reports)
    assert embedded[0] == 0 and written[0] == 0, reports
    assert embedded[1] > 0
    assert sum("waiting for run" in err for err in errors) == 1
    storage = resolve_storage(str(home), tracking_url=tracking_url)
    store, tracking = VectorStore(storage.lancedb_uri), TrackingStore(storage.tracking_url)
    index = index_of(config)
    rows = store.scan(index, ["chunk_id", "doc_id"]).to_pylist()
    assert len(rows) == len({r["chunk_id"] for r in rows})  # no duplicates
    assert {r["doc_id"] for r in rows} == {f"article-{i:02d}.md" for i in range(24)}
    assert reconcile_index(store, tracking, index).ok
    assert tracking.document_count(index) == 24


def test_the_landing_lock_excludes_and_expires(tmp_path):
    tracking = TrackingStore(f"sqlite:///{tmp_path / 't.db'}")
    inside, overlaps = [], []

    def land(owner: str) -> None:
        with tracking.landing_lease("kb", owner):
            inside.append(owner)
            if len(inside) > 1:
                overlaps.append(tuple(inside))
            time.sleep(0.3)
            inside.remove(owner)

    threads = [threading.Thread(target=land, args=(f"run-{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    with (
        tracking.landing_lease("kb", "holder", lease_seconds=60),
        pytest.raises(LockTimeoutError, match="held by holder"),
        tracking.landing_lease("kb", "waiter", wait_seconds=0.5),
    ):
        pass
    # a holder on another machine that stopped renewing: its lease expires
    with tracking.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO collection_locks (collection, owner, expires_at, host, pid) "
                "VALUES ('kb', 'dead', 0, 'elsewhere', 1)"
            )
        )
    with tracking.landing_lease("kb", "next", wait_seconds=2):
        pass
    # a holder on this machine whose process is gone: taken over at once, lease or not
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with tracking.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO collection_locks (collection, owner, expires_at, host, pid) "
                "VALUES ('kb', 'killed', :expires, :host, :pid)"
            ),
            {"expires": time.time() + 3600, "host": socket.gethostname(), "pid": gone.pid},
        )
    with tracking.landing_lease("kb", "after-crash", wait_seconds=2):
        pass


def test_many_small_runs_keep_fragments_and_versions_bounded(make_pipeline, runner, workspace):
    workspace["config"].write_text(
        workspace["config"].read_text() + "maintenance: {max_fragments: 16, max_versions: 40,"
        " threshold_version_retention_minutes: 0}\n"
    )
    pipeline = make_pipeline()
    pipeline.run("run-0", runner)
    path = workspace["docs"] / "notes.txt"
    for i in range(200):
        path.write_text(f"Plain text notes, revision {i}.\n\nThe office opens at nine.\n")
        pipeline.run(f"run-{i + 1}", runner, doc_ids=["notes.txt"])
    assert pipeline.store.fragment_count(pipeline.index) <= 16 + 1
    assert len(pipeline.store.open(pipeline.index).list_versions()) <= 40 + 2
    assert reconcile_index(pipeline.store, pipeline.tracking, pipeline.index).ok
    hits = pipeline.store.open(pipeline.index).search().where("doc_id = 'notes.txt'").to_list()
    assert any("revision 199" in h["text"] for h in hits)


def _open_tracking(url: str) -> None:
    TrackingStore(url)


def test_several_processes_can_create_the_tracking_schema_at_once(tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("fork")  # start together: the widest race
    for attempt in range(5):
        url = f"sqlite:///{tmp_path / f'race-{attempt}.db'}"
        processes = [context.Process(target=_open_tracking, args=(url,)) for _ in range(4)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        assert [p.exitcode for p in processes] == [0, 0, 0, 0]


def test_runs_recording_the_same_changes_and_failures_at_once_do_not_conflict(tracking_url):
    """Collect in two runs of one partition records the same pending changes and failures.

    Each record is read-then-write; run together on one key they used to fail the second
    writer with a unique-constraint error (seen in CI on SQLite) instead of merging.
    """
    index = generation_index("handbook", "0123456789abcdef")
    stores = [TrackingStore(tracking_url) for _ in range(4)]
    errors: list[BaseException] = []
    for round_ in range(15):
        ids = [f"round-{round_}-doc-{i}" for i in range(40)]
        failure = FailureRecord(ids[0], "collect", "unreadable", "ValueError", "bad bytes")
        barrier = threading.Barrier(len(stores))

        def record(store: TrackingStore, ids: list[str] = ids, failure=failure, barrier=barrier):
            try:
                barrier.wait()
                store.record_pending(index, dict.fromkeys(ids, 1.0))
                store.record_failures(index, [failure], run_id=uuid.uuid4().hex)
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=record, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors[0]
        assert stores[0].failures_by_doc(index)[ids[0]]["attempts"] == len(stores)
    assert stores[0].freshness(index)["pending"] == 15 * 40
    for store in stores:
        store.dispose()
