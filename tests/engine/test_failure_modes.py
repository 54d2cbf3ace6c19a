"""Garbage in, hostile ids, quarantine and completeness: every claim of docs/failure-modes.md."""

import hashlib
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from batch_pipeline.config import load_config
from batch_pipeline.health.completeness import partition_completeness
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import open_partition
from batch_pipeline.runs.request import RunRequest
from batch_pipeline.state.storage import resolve_storage


def doc_ids(pipeline):
    table = pipeline.store.open(pipeline.index)
    return {r["doc_id"] for r in table.search().select(["doc_id"]).limit(None).to_list()}


def reasons(pipeline):
    return {f["doc_id"]: f["reason"] for f in pipeline.tracking.list_failures(pipeline.index)}


def test_garbage_documents_are_recorded_and_everything_else_lands(make_pipeline, runner, workspace):
    docs = workspace["docs"]
    (docs / "one-line.txt").write_text("x" * (10 * 1024 * 1024))  # a single 10 MB line
    (docs / "nested.html").write_text("<div>" * 3000 + "<p>Deep but fine.</p>" + "</div>" * 3000)
    (docs / "untokenisable.md").write_text("\u200b\u200b\u200b")  # nothing the tokenizer keeps
    (docs / 'it\'s "quoted"\nname.md').write_text("# Quoted\n\nA file with a hostile name.")
    pipeline = make_pipeline()
    out = pipeline.run("run-1", runner)
    assert reasons(pipeline) == {"one-line.txt": "too_large", "untokenisable.md": "no_text"}
    landed = doc_ids(pipeline)
    assert {"nested.html", 'it\'s "quoted"\nname.md', "notes.txt", "refunds.md"} <= landed
    assert out["collect"].counts["failed"] == 1 and len(out["prepare"].failures) == 1
    # the hostile name can be changed and deleted without touching anything else
    (docs / 'it\'s "quoted"\nname.md').unlink()
    pipeline.run("run-2", runner)
    assert 'it\'s "quoted"\nname.md' not in doc_ids(pipeline)
    assert {"nested.html", "notes.txt", "refunds.md"} <= doc_ids(pipeline)


def test_a_document_deleted_between_collect_and_prepare(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    collected = pipeline.collect("run-1")
    (workspace["docs"] / "refunds.md").unlink()
    chunks = pipeline.prepare("run-1", collected.path)
    plan = pipeline.plan("run-1", chunks.path)
    embeddings = pipeline.execute("run-1", plan.path, lambda: runner)
    pipeline.land_stage(RunRequest("run-1"), collected.path, chunks.path, embeddings.path)
    assert "refunds.md" in doc_ids(pipeline)  # landed from the collected snapshot
    out = pipeline.run("run-2", runner)
    assert out["collect"].counts["deleted"] == 1
    assert "refunds.md" not in doc_ids(pipeline)


def test_failures_are_retried_then_quarantined_until_the_content_changes(
    make_pipeline, runner, workspace
):
    (workspace["docs"] / "broken.md").write_bytes(b"")
    pipeline = make_pipeline()
    for attempt in range(1, 4):
        out = pipeline.run(f"run-{attempt}", runner)
        assert out["collect"].counts["failed"] == 1  # retried every run
        assert pipeline.tracking.list_failures(pipeline.index)[0]["attempts"] == attempt
        done = partition_completeness(pipeline.tracking, pipeline.index, 3)
        assert done["completeness"] == (1.0 if attempt == 3 else 0.75)
    out = pipeline.run("run-4", runner)
    assert out["collect"].counts["quarantined"] == 1 and out["collect"].counts["failed"] == 0
    assert pipeline.tracking.list_failures(pipeline.index)[0]["attempts"] == 3
    (workspace["docs"] / "broken.md").write_text("# Fixed\n\nNow it has content.")
    out = pipeline.run("run-5", runner)
    assert out["collect"].counts["new"] == 1
    assert "broken.md" in doc_ids(pipeline)
    assert pipeline.tracking.list_failures(pipeline.index) == []


HOSTILE = ["a' OR 1=1 --", 'quote"double', "ünïcødé ✓ 文档", "../../etc/passwd", "semi;colon"]


@pytest.fixture()
def hostile_sql(tmp_path):
    url = f"sqlite:///{tmp_path / 'cms.db'}"
    engine = sa.create_engine(url)
    table = sa.Table(
        "pages",
        sa.MetaData(),
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("title", sa.Text),
        sa.Column("body", sa.Text),
        sa.Column("updated_at", sa.DateTime(timezone=True)),
    )
    table.create(engine)
    now = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [
        {"id": i, "title": f"T{n}", "body": f"Body number {n}.", "updated_at": now}
        for n, i in enumerate([*HOSTILE, "plain", "nul\x00id"])
    ]
    with engine.begin() as conn:
        conn.execute(table.insert(), rows)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"collections:\n  - name: cms\n    source: {{kind: sql, url: '{url}', table: pages}}\n"
    )
    return config, engine, table


def test_hostile_doc_ids_are_escaped_everywhere(hostile_sql, runner, tmp_path):
    config, engine, table = hostile_sql
    pipeline = open_partition(load_config(config), resolve_storage(str(tmp_path / "h")), "cms")
    pipeline.run("run-1", runner)
    assert doc_ids(pipeline) == {*HOSTILE, "plain"}
    assert reasons(pipeline) == {"nul\x00id": "invalid_doc_id"}
    with engine.begin() as conn:
        conn.execute(table.delete().where(table.c.id == "a' OR 1=1 --"))
        conn.execute(
            table.update()
            .where(table.c.id == 'quote"double')
            .values(body="Edited body.", updated_at=datetime(2026, 11, 2, tzinfo=UTC))
        )
    out = pipeline.run("run-2", runner)
    assert out["land"].summary.documents_deleted == 1 and out["land"].summary.documents_landed == 1
    assert doc_ids(pipeline) == ({*HOSTILE, "plain"} - {"a' OR 1=1 --"})
    assert pipeline.tracking.document_count(pipeline.index) == len(HOSTILE)


def test_an_unreadable_folder_is_unseen_not_deleted(
    make_pipeline, fake_embedder, workspace, monkeypatch, capsys
):
    """A folder beneath the root that cannot be opened is an error for that subtree: its
    documents keep their rows, the failure names the folder, doctor reports it, and the
    generation is not complete while it lasts. A targeted run (the sensor's) that cannot
    look at a document does not delete it either."""
    import errno
    import os

    from batch_pipeline import cli

    private = workspace["docs"] / "private"
    private.mkdir()
    (private / "salaries.md").write_text("# Salaries\n\nConfidential figures.\n")
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    assert "private/salaries.md" in doc_ids(pipeline)
    scandir, stat = os.scandir, os.stat

    def denied(path: object) -> PermissionError:  # FAKE: EACCES, as for a non-root user
        return PermissionError(errno.EACCES, "Permission denied", os.fspath(path))

    def unlistable(path: object = ".") -> object:
        if isinstance(path, str | os.PathLike) and os.fspath(path) == str(private):
            raise denied(path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", unlistable)
    out = pipeline.run("run-2", fake_embedder)
    assert out["land"].summary.documents_deleted == 0 and out["collect"].counts["deleted"] == 0
    assert "private/salaries.md" in doc_ids(pipeline)
    assert out["collect"].metadata()["unlisted"] == ["private/"]
    (failure,) = pipeline.tracking.list_failures(pipeline.index)
    assert (failure["doc_id"], failure["reason"]) == ("private/", "unlistable")
    assert "cannot list private/: Permission denied" in failure["message"]
    assert not pipeline.product.record().complete
    args = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*args, "doctor"]) == 1
    assert "cannot list private/: Permission denied" in capsys.readouterr().out

    def unstattable(path: object, *args: object, **kwargs: object) -> object:
        named = isinstance(path, str | os.PathLike)
        if named and os.fspath(path).startswith(str(private) + os.sep):
            raise denied(path)
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", unstattable)
    out = pipeline.run("run-3", fake_embedder, doc_ids=["private/salaries.md"])
    assert out["collect"].counts["deleted"] == 0
    assert "private/salaries.md" in doc_ids(pipeline)

    monkeypatch.undo()  # readable again: the failures go, nothing was lost
    pipeline.run("run-4", fake_embedder)
    assert pipeline.tracking.list_failures(pipeline.index) == []
    assert "private/salaries.md" in doc_ids(pipeline)
    assert pipeline.product.record().complete


def test_a_transient_read_error_is_retried_and_never_quarantines(
    s3_bucket, moto_server, tmp_path, fake_embedder, capsys
):
    """Connection errors, timeouts and 5xx say nothing about the object: a document they
    hit is retried on every run, never quarantined, and the partition is not healthy while
    it is unread; once the endpoint answers, it lands."""
    from botocore.exceptions import EndpointConnectionError

    from batch_pipeline import cli

    client, bucket = s3_bucket
    for name in ("a", "b"):
        client.put_object(Bucket=bucket, Key=f"kb/{name}.md", Body=f"# {name}\n\nText.\n".encode())
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: kb\n"
        f"    source: {{kind: s3, bucket: {bucket}, prefix: kb/, endpoint_url: '{moto_server}'}}\n"
    )
    down = {"kb/b.md"}

    class FlakyClient:  # FAKE fault: the real moto client, with one object unreachable
        def __getattr__(self, name: str) -> object:
            return getattr(client, name)

        def get_object(self, **kwargs: object) -> object:
            if kwargs["Key"] in down:
                raise EndpointConnectionError(endpoint_url=moto_server)
            return client.get_object(**kwargs)

    def pipeline() -> IndexPartition:
        storage = resolve_storage(str(tmp_path / "home"))
        flaky = FlakyClient()
        return open_partition(load_config(config), storage, "kb", s3_client=lambda _: flaky)

    for attempt in range(1, 5):  # past quarantine_after_failures (3)
        out = pipeline().run(f"run-{attempt}", fake_embedder)
        assert out["collect"].counts["failed"] == 1 and out["collect"].counts["quarantined"] == 0
    engine = pipeline()
    assert reasons(engine) == {"kb/b.md": "unreachable"}
    assert partition_completeness(engine.tracking, engine.index, 3)["documents_quarantined"] == 0
    args = ["--config", str(config), "--home", str(tmp_path / "home")]
    assert cli.main([*args, "doctor"]) == 1
    assert "1 documents could not be read for a reason that says nothing" in capsys.readouterr().out
    down.clear()
    pipeline().run("run-5", fake_embedder)
    assert doc_ids(engine) == {"kb/a.md", "kb/b.md"} and reasons(engine) == {}


def test_search_prints_names_escaped(make_pipeline, runner, workspace, capsys):
    """A file name with an escape sequence or a newline reaches the terminal escaped: it
    can neither colour it nor split a result's line; nor can a bidi override or another
    format character reorder or hide what is printed (round six)."""
    from batch_pipeline import cli

    (workspace["docs"] / "evil\x1b[31m.md").write_text("# Refunds\n\nRefunds take ten days.\n")
    (workspace["docs"] / "two\nlines.md").write_text("# Refunds too\n\nRefunds again.\n")
    # bidi and format characters (Unicode's Cf) in a name and a title: escaped as well
    (workspace["docs"] / "invoice\u202egnp.md").write_text(
        "# Refunds \u2067hidden\u2069 and\u200b more\n\nRefunds, a third time.\n"
    )
    make_pipeline().run("run-1", runner)
    base = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*base, "search", "refunds", "--collection", "handbook", "-k", "5"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[31m.md" in out
    assert "two\\nlines.md" in out
    assert not any(c in out for c in "\u202e\u2067\u2069\u200b")
    assert "invoice\\u202egnp.md" in out and "\\u2067hidden\\u2069" in out
    assert not any(line.startswith("lines.md") for line in out.splitlines())


def test_a_fifo_is_refused_at_read_time_not_waited_on(tmp_path):
    """A file swapped for a FIFO after listing: opening it would block for ever (holding the
    partition's lease); it is refused at once as not a regular file."""
    import os
    import threading

    from batch_pipeline.sources import DocumentReadError
    from batch_pipeline.sources.filesystem import FilesystemSource

    os.mkfifo(tmp_path / "page.md")
    source = FilesystemSource(tmp_path, "**/*")
    assert list(source.list_entries()) == []  # never listed as a document
    outcome: list[object] = []

    def read() -> None:
        try:
            source.read("page.md")
        except DocumentReadError as error:
            outcome.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)  # a blocking open never returns; the refusal returns at once
    assert not reader.is_alive()
    assert "is not a regular file" in str(outcome[0])


def test_a_file_name_that_is_not_utf8_is_a_failure_and_the_rest_lands(
    make_pipeline, fake_embedder, workspace, capsys
):
    import os

    from batch_pipeline import cli

    with open(os.path.join(os.fsencode(workspace["docs"]), b"caf\xe9.md"), "wb") as handle:
        handle.write(b"# Cafe\n\nA page saved under a Latin-1 name.\n")
    pipeline = make_pipeline()
    out = pipeline.run("run-1", fake_embedder)
    assert reasons(pipeline) == {"caf\\xe9.md": "invalid_doc_id"}
    (failure,) = pipeline.tracking.list_failures(pipeline.index)
    assert "the name 'caf\\\\xe9.md' is not UTF-8: rename the file" in failure["message"]
    assert {"notes.txt", "refunds.md"} <= doc_ids(pipeline)
    assert out["land"].summary.documents_landed >= 2
    args = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    for command in ("status", "doctor", "failures"):
        assert cli.main([*args, command]) in (0, 1)
    assert "caf\\\\xe9.md" in capsys.readouterr().out


def test_a_path_longer_than_the_system_allows_is_recorded_and_the_run_goes_on(
    make_pipeline, fake_embedder, workspace
):
    import os

    from batch_pipeline import cli

    fd = os.open(workspace["docs"], os.O_RDONLY)
    try:
        for _ in range(24):  # 24 x 200 characters: past PATH_MAX (4096)
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        page = os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(page, b"# Deep\n\nToo deep to name.\n")
        os.close(page)
    finally:
        os.close(fd)
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    assert {"notes.txt", "refunds.md"} <= doc_ids(pipeline)
    (failure,) = pipeline.tracking.list_failures(pipeline.index)
    assert failure["reason"] == "invalid_doc_id" and "File name too long" in failure["message"]
    args = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*args, "status"]) == 0 and cli.main([*args, "doctor"]) in (0, 1)


def test_a_lost_data_file_is_found_repaired_and_reads_fail_in_one_line(
    make_pipeline, fake_embedder, workspace, capsys
):
    """A data file of the live table deleted: reads fail with one line, not a traceback;
    doctor names the file and the remedy; `repair --yes` restores the newest whole version,
    and the next full run re-lands what that version lacks."""
    from batch_pipeline import cli

    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    (workspace["docs"] / "late.md").write_text("# Late\n\nA page added by the second run.\n")
    pipeline.run("run-2", fake_embedder)
    data = workspace["home"] / "lancedb" / f"{pipeline.index}.lance" / "data"
    newest = max(data.iterdir(), key=lambda path: path.stat().st_mtime_ns)
    newest.unlink()
    args = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    for command in (["status"], ["search", "late", "--collection", "handbook"]):
        assert cli.main([*args, *command]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"the table {pipeline.index} is damaged" in err
    assert cli.main([*args, "doctor"]) == 1
    out = capsys.readouterr().out
    assert newest.name in out and "repair --product handbook --yes` restores version" in out
    assert cli.main([*args, "repair", "--collection", "handbook"]) == 1  # says what, does not
    assert "run again with --yes" in capsys.readouterr().out
    assert pipeline.store.damage(pipeline.index) is not None
    assert cli.main([*args, "repair", "--collection", "handbook", "--yes"]) == 0
    assert pipeline.store.damage(pipeline.index) is None
    assert pipeline.product.registry.audit_log("handbook")[-1].action == "repair"
    make_pipeline().run("run-3", fake_embedder)
    assert {"late.md", "notes.txt", "refunds.md"} <= doc_ids(pipeline)
    assert cli.main([*args, "doctor"]) == 0


def test_an_object_replaced_between_listing_and_reading_lands_under_its_own_version(
    s3_bucket, moto_server, tmp_path, fake_embedder, monkeypatch
):
    """The listing saw one version; by the read the object was replaced: the newer text
    lands under the newer ETag, so the next run does not take it for unchanged or stale."""
    from batch_pipeline.sources.s3 import S3Source

    client, bucket = s3_bucket
    client.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n\nThe first text.\n")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: kb\n"
        f"    source: {{kind: s3, bucket: {bucket}, prefix: kb/, endpoint_url: '{moto_server}'}}\n"
    )
    storage = resolve_storage(str(tmp_path / "home"))
    pipeline = open_partition(load_config(config), storage, "kb")
    listed = list(pipeline.source.list_entries())  # what the listing says: the first version
    client.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n\nThe second text.\n")
    monkeypatch.setattr(S3Source, "list_entries", lambda self: iter(listed))  # FAKE: stale
    pipeline.run("run-1", fake_embedder)
    head = client.head_object(Bucket=bucket, Key="kb/a.md")
    (landed,) = pipeline.tracking.landed_documents(pipeline.index).values()
    assert landed.source_version != listed[0].version
    assert landed.source_version.startswith(head["ETag"].strip('"'))
    (row,) = pipeline.store.open(pipeline.index).to_arrow().to_pylist()
    assert "second text" in row["text"] and row["source_version"] == landed.source_version


def test_a_run_that_could_not_read_most_of_its_source_exits_4(workspace, capsys, monkeypatch):
    """What read landed, but a run that could not read most of what it attempted is no
    success: exit 4, saying how many and where to look. Documents failing for their own
    content (empty, no text) are no read failure: a rerun with only those exits 0."""
    from batch_pipeline import cli
    from batch_pipeline.inference import fake
    from batch_pipeline.inference import runner as runner_module
    from batch_pipeline.sources import DocumentReadError
    from batch_pipeline.sources.filesystem import FilesystemSource

    monkeypatch.setattr(
        runner_module, "EmbeddingRunner", lambda model, **_: fake.FakeEmbedder(model)
    )
    for n in range(4):
        (workspace["docs"] / f"locked-{n}.md").write_text(f"# Locked {n}\n\nText.\n")
    read = FilesystemSource.read

    def refused(self, doc_id: str):  # noqa: ANN001, ANN202 - FAULT: EIO on four files
        if doc_id.startswith("locked-"):
            raise DocumentReadError(f"cannot read {doc_id!r}: Input/output error")
        return read(self, doc_id)

    monkeypatch.setattr(FilesystemSource, "read", refused)
    args = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*args, "run", "--collection", "handbook"]) == 4
    err = capsys.readouterr().err
    assert "4 of the 7 documents the run attempted could not be read (57%)" in err
    assert "limits.max_unread_fraction (0.5)" in err
    monkeypatch.setattr(FilesystemSource, "read", read)
    for n in range(4):
        (workspace["docs"] / f"locked-{n}.md").write_bytes(b"")  # now empty: their own fault
    assert cli.main([*args, "run", "--collection", "handbook"]) == 0


@pytest.fixture()
def hung_mount(monkeypatch):
    """FAULT: a hung mount under a.md: reading it waits up to 60 s (released on teardown);
    other files read as usual. Sources made before this fixture keep their own reader."""
    import threading

    from batch_pipeline.sources.filesystem import FilesystemSource

    release = threading.Event()
    read = FilesystemSource.read

    def hanging(self, doc_id: str):  # noqa: ANN001, ANN202
        if doc_id == "a.md":
            release.wait(60)
        return read(self, doc_id)

    monkeypatch.setattr(FilesystemSource, "read", hanging)
    yield
    release.set()


def test_a_read_that_hangs_times_out_as_transient_and_the_rest_is_read(tmp_path, hung_mount):
    from batch_pipeline.sources import DocumentReadError
    from batch_pipeline.sources.filesystem import FilesystemSource

    (tmp_path / "a.md").write_text("A")
    (tmp_path / "b.md").write_text("B")
    source = FilesystemSource(tmp_path, "**/*", read_timeout=0.2)
    results = dict(source.read_many(["a.md", "b.md"]))
    assert isinstance(results["a.md"], DocumentReadError) and results["a.md"].transient
    assert "took over 0.2s (a hung mount?)" in str(results["a.md"])
    assert results["b.md"].data == b"B"


def test_the_sensor_s_change_check_does_not_wait_on_a_hung_read(tmp_path, request):
    import time

    from batch_pipeline.sources.filesystem import FilesystemSource

    (tmp_path / "a.md").write_text("A")
    (tmp_path / "b.md").write_text("B")
    state = FilesystemSource(tmp_path, "**/*").changes_since(None).state
    for name in ("a.md", "b.md"):  # both edited: the next tick hashes both
        (tmp_path / name).write_text(name.upper() + " edited")
    request.getfixturevalue("hung_mount")  # the mount hangs from the next tick on
    started = time.monotonic()
    changes = FilesystemSource(tmp_path, "**/*", read_timeout=0.2).changes_since(state)
    waited = time.monotonic() - started
    assert waited < 30  # the read's timeout, not the hung read (60 s)
    assert sorted(e.doc_id for e in changes.changed) == ["a.md", "b.md"]
    assert changes.state["a.md"][1] is None  # not hashed: looked at again as a change
    assert changes.state["b.md"][1] == hashlib.sha256(b"B.MD edited").hexdigest()


def test_the_local_executor_refuses_a_vector_that_is_not_finite_before_any_checkpoint(
    make_pipeline, fake_embedder, workspace
):
    """The one guard every executor writes through (round six, defect 1): an in-process
    model that overflows on one input (a FAKE embedder poisoned for the refund page) lands
    the rest, lists that document's failure, and the next run lands it."""
    import numpy as np

    from batch_pipeline.state.checkpoints import unlandable_parts

    class Overflowing:
        """The FAKE embedder, with NaN in the vector of any text about refunds."""

        def __init__(self, healthy):  # noqa: ANN001
            self.healthy = healthy

        def __getattr__(self, name: str):  # noqa: ANN204 - the healthy embedder's own
            return getattr(self.healthy, name)

        def run(self, batches, stats=None):  # noqa: ANN001, ANN201
            for positions, texts, *rest in batches:
                ((_, vectors),) = self.healthy.run([(positions, texts, *rest)], stats)
                for row, text in enumerate(texts):
                    if "Refund" in text:
                        vectors[row, 0] = np.nan
                yield positions, vectors

    poisoned = Overflowing(fake_embedder)
    pipeline = make_pipeline()
    summaries = pipeline.run("run-1", poisoned)
    failed = {f.doc_id: f.message for f in summaries["land"].summary.failures}
    assert list(failed) == ["refunds.md"] and "not finite" in failed["refunds.md"]
    landed = {r["doc_id"] for r in pipeline.store.open(pipeline.index).to_arrow().to_pylist()}
    assert "account/reset-password.md" in landed and "refunds.md" not in landed
    assert unlandable_parts(pipeline.staging.root) == {}
    make_pipeline().run("run-2", fake_embedder)
    landed = {r["doc_id"] for r in pipeline.store.open(pipeline.index).to_arrow().to_pylist()}
    assert "refunds.md" in landed
