"""The three source kinds on real servers: a folder, moto S3, SQLite and PostgreSQL."""

import hashlib
import os
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath

import pytest
import sqlalchemy as sa

from batch_pipeline.sources import DocumentReadError, SourceUnavailableError
from batch_pipeline.sources.filesystem import FilesystemSource, _Reader
from batch_pipeline.sources.s3 import S3Source
from batch_pipeline.sources.sql import SqlSource

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def test_filesystem_never_leaves_its_root(tmp_path):
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("# A\n\ntext")
    outside = tmp_path / "secret.md"
    outside.write_text("secret")
    os.symlink(outside, root / "link.md")
    os.symlink(tmp_path, root / "up")
    source = FilesystemSource(root, "**/*.md")
    assert [e.doc_id for e in source.list_entries()] == ["sub/a.md"]
    for bad in ("../secret.md", "link.md", "up/secret.md", "/etc/passwd"):
        with pytest.raises(DocumentReadError):
            source.read(bad)
    assert list(source.entries_for(["../secret.md", "link.md", "sub/a.md"]))[0].doc_id == "sub/a.md"


def test_filesystem_lists_in_path_order_as_it_walks(tmp_path, monkeypatch):
    ids = ["a.md", "a-b.md", "a b/c.md", "a/b.md", "a/z/y.md", "B.md", "é/x.md", "z.md"]
    ids += [f"zz/{n:02d}/doc.md" for n in range(40)]  # folders not reached by the first entry
    for doc_id in ids:
        (tmp_path / doc_id).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / doc_id).write_text("x")
    source = FilesystemSource(tmp_path, "**/*.md")
    listed = [e.doc_id for e in source.list_entries()]
    assert listed == sorted(ids, key=lambda doc_id: PurePosixPath(doc_id).parts)
    scanned = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: scanned.append(path) or real_scandir(path))
    entries = source.list_entries()
    assert next(entries).doc_id == "B.md"  # upper case sorts first, as in a sort of the paths
    assert len(scanned) == 1  # the root only: the tree is not listed before the first entry
    assert len(list(entries)) == len(ids) - 1
    assert len(scanned) == 1 + 5 + 40  # the root, a, a b, a/z, zz, é and zz's 40 folders


def test_a_folder_removed_during_the_walk_is_not_a_gap(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "doc.md").write_text("x")
    source = FilesystemSource(tmp_path, "**/*.md")
    entries = source.list_entries()
    assert next(entries).doc_id == "a/doc.md"
    shutil.rmtree(tmp_path / "b")  # after the root was listed, before the walk reaches it
    assert list(entries) == []
    assert source.listing_gaps() == []  # gone, so its documents are deleted, not unseen


def test_filesystem_changes_hash_only_what_looks_changed(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("one")
    (root / "b.md").write_text("two")
    source = FilesystemSource(root, "*.md")
    first = source.changes_since(None)
    assert sorted(e.doc_id for e in first.changed) == ["a.md", "b.md"]
    (root / "a.md").write_text("one")  # touched, same bytes
    os.utime(root / "a.md", ns=(1, 1))
    (root / "b.md").write_text("two, edited")
    (root / "c.md").write_text("three")
    second = source.changes_since(first.state)
    assert sorted(e.doc_id for e in second.changed) == ["b.md", "c.md"]
    (root / "c.md").unlink()
    third = source.changes_since(second.state)
    assert third.changed == [] and third.deleted == ["c.md"]


def test_a_look_hashes_within_its_time_and_later_looks_fill_in(tmp_path):
    """A first look at a large folder must not outlast Dagster's 60 s sensor timeout: files
    it has no time to hash are changes all the same, and later looks hash them."""
    for name in "abcde":
        (tmp_path / f"{name}.md").write_text(name)
    now = [0.0]
    source = FilesystemSource(tmp_path, "*.md", hash_seconds=2.5, clock=lambda: now[0])
    read = source.read

    def one_second_read(doc_id):
        now[0] += 1.0
        return read(doc_id)

    source.read = one_second_read
    first = source.changes_since(None)
    assert len(first.changed) == 5  # new: changes, hashed or not
    digests = [token[1] for token in first.state.values()]
    assert digests[:3] == [hashlib.sha256(n.encode()).hexdigest() for n in "abc"]
    assert digests[3:] == ["", ""]  # no time left: not hashed yet
    second = source.changes_since(first.state)
    assert second.changed == [] and second.deleted == []
    assert all(token[1] for token in second.state.values())  # filled in, not changes


def test_a_moved_file_with_no_time_left_is_put_off_to_the_next_look(tmp_path):
    (tmp_path / "a.md").write_text("one")
    (tmp_path / "b.md").write_text("two")
    state = FilesystemSource(tmp_path, "*.md").changes_since(None).state
    (tmp_path / "a.md").write_text("one")  # touched, same bytes
    os.utime(tmp_path / "a.md", ns=(1, 1))
    (tmp_path / "b.md").write_text("two, edited")
    hurried = FilesystemSource(tmp_path, "*.md", hash_seconds=0).changes_since(state)
    assert hurried.changed == [] and hurried.state == state  # nothing read, nothing lost
    later = FilesystemSource(tmp_path, "*.md").changes_since(hurried.state)
    assert [e.doc_id for e in later.changed] == ["b.md"]


def test_a_hung_read_holds_a_look_no_longer_than_its_hashing_time(tmp_path):
    (tmp_path / "a.md").write_text("one")
    source = FilesystemSource(tmp_path, "*.md", read_timeout=600, hash_seconds=0.5)
    hung = threading.Event()
    source.read = lambda doc_id: hung.wait(600)  # a stale mount: the read never returns
    started = time.monotonic()
    try:
        look = source.changes_since(None)
    finally:
        hung.set()
    assert time.monotonic() - started < 30  # not the 600 s read timeout
    assert [e.doc_id for e in look.changed] == ["a.md"]
    assert look.state["a.md"][1] is None  # unreadable: a change again at the next look


def test_sources_leave_no_idle_reader_threads_behind(tmp_path, monkeypatch):
    """Every source read through a worker thread; before the fix each kept its thread for
    the process's life (a test session held a hundred)."""
    monkeypatch.setattr(_Reader, "IDLE_SECONDS", 0.1)
    (tmp_path / "a.md").write_text("one")

    def readers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "source-read" and t.is_alive()}

    before = readers()  # other tests' (a hung read's, say): they may end meanwhile
    sources = [FilesystemSource(tmp_path, "*.md") for _ in range(20)]
    for source in sources:
        assert source.read_within_timeout("a.md").data == b"one"
    deadline = time.monotonic() + 10
    while readers() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not readers() - before  # every thread these sources started has ended
    # an idle source reads again: its reader starts anew
    assert sources[0].read_within_timeout("a.md").data == b"one"


def test_s3_lists_reads_and_detects_changes(s3_bucket):
    client, bucket = s3_bucket
    client.put_object(Bucket=bucket, Key="kb/a.md", Body=b"# A\n\nalpha")
    client.put_object(Bucket=bucket, Key="kb/b.md", Body=b"# B\n\nbeta")
    client.put_object(Bucket=bucket, Key="other/c.md", Body=b"# C")
    source = S3Source(client, bucket, "kb/", "*.md")
    entries = {e.doc_id: e for e in source.list_entries()}
    assert sorted(entries) == ["kb/a.md", "kb/b.md"]
    assert entries["kb/a.md"].version and entries["kb/a.md"].changed_at
    assert source.read("kb/a.md").data == b"# A\n\nalpha"
    state = source.changes_since(None).state
    client.put_object(Bucket=bucket, Key="kb/b.md", Body=b"# B\n\nbeta, edited")
    client.delete_object(Bucket=bucket, Key="kb/a.md")
    changes = source.changes_since(state)
    assert [e.doc_id for e in changes.changed] == ["kb/b.md"]
    assert changes.deleted == ["kb/a.md"]
    with pytest.raises(DocumentReadError, match="deleted before it could be read"):
        source.read("kb/a.md")
    assert [e.doc_id for e in source.entries_for(["kb/a.md", "kb/b.md"])] == ["kb/b.md"]


def test_s3_unreachable_and_missing_bucket_are_source_errors(s3_bucket):
    import boto3
    from botocore.config import Config

    client, _ = s3_bucket
    with pytest.raises(SourceUnavailableError, match="NoSuchBucket") as missing:
        list(S3Source(client, "no-such-bucket-here").list_entries())
    assert missing.value.transient is False  # would fail the same way: not retried
    dead = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(SourceUnavailableError, match="cannot list") as unreachable:
        list(S3Source(dead, "docs").list_entries())
    assert unreachable.value.transient is True  # no answer: worth trying again


def test_sql_lists_reads_and_records_null_bodies(sql_table):
    url, name, engine, table = sql_table
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [
                {
                    "id": 1,
                    "title": "Refunds",
                    "body": "Annual plans are refunded.",
                    "updated_at": T0,
                    "deleted": False,
                },
                {"id": 2, "title": "Empty", "body": None, "updated_at": T0, "deleted": False},
                {"id": 3, "title": "Gone", "body": "old", "updated_at": T0, "deleted": True},
            ],
        )
    source = SqlSource(url, table=name, deleted_column="deleted", fmt="markdown")
    assert [e.doc_id for e in source.list_entries()] == ["1", "2"]
    document = source.read("1")
    assert document.data == b"Annual plans are refunded."
    assert document.title == "Refunds" and document.fmt == "markdown"
    with pytest.raises(DocumentReadError, match="NULL body"):
        source.read("2")
    assert [e.doc_id for e in source.entries_for(["1", "3", "99", "x"])] == ["1"]


def test_sql_cursor_skips_nothing_that_shares_the_cursor_instant(sql_table):
    url, name, engine, table = sql_table
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [
                {"id": 1, "title": "a", "body": "a", "updated_at": T0, "deleted": False},
                {
                    "id": 2,
                    "title": "b",
                    "body": "b",
                    "updated_at": T0 + timedelta(seconds=5),
                    "deleted": False,
                },
            ],
        )
    source = SqlSource(url, table=name, deleted_column="deleted")
    first = source.changes_since(None)
    assert sorted(e.doc_id for e in first.changed) == ["1", "2"]
    again = source.changes_since(first.state)
    assert again.changed == [] and again.deleted == []
    with engine.begin() as conn:  # a late writer, at exactly the cursor's instant
        conn.execute(
            table.insert(),
            [
                {
                    "id": 3,
                    "title": "c",
                    "body": "c",
                    "updated_at": T0 + timedelta(seconds=5),
                    "deleted": False,
                }
            ],
        )
        conn.execute(
            table.update()
            .where(table.c.id == 1)
            .values(deleted=True, updated_at=T0 + timedelta(seconds=9))
        )
    third = source.changes_since(again.state)
    assert [e.doc_id for e in third.changed] == ["3"]
    assert third.deleted == ["1"]


def test_sql_query_mode_and_unreachable_database(sql_table):
    url, name, engine, table = sql_table
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [{"id": 7, "title": "q", "body": "from a query", "updated_at": T0, "deleted": False}],
        )
    source = SqlSource(url, query=f"SELECT id, title, body, updated_at FROM {name} WHERE id > 5")
    assert [e.doc_id for e in source.list_entries()] == ["7"]
    assert source.read("7").data == b"from a query"
    dead = SqlSource("postgresql+psycopg://nobody:secret@127.0.0.1:9/none", table="t")
    with pytest.raises(SourceUnavailableError) as error:
        list(dead.list_entries())
    assert "secret" not in str(error.value)
    assert error.value.transient is True  # the server did not answer: worth trying again
    assert "***" in dead.describe()


def test_a_first_tick_whose_source_does_not_answer_does_not_read_tracking():
    """The publish sensor's first tick reads tracking's landed versions (all of them, at any
    size) only once the source answered; an unreachable database skips the tick first."""
    from batch_pipeline.triggers.publish import evaluate_publish

    dead = SqlSource("postgresql+psycopg://nobody@127.0.0.1:9/none", table="t")
    reads = []
    decision = evaluate_publish(
        "kb", dead, None, 1000.0, 30, 200, landed=lambda: reads.append(1) or iter(())
    )
    assert decision.runs == [] and decision.skip_reason.startswith("source unavailable")
    assert reads == []


def test_a_missing_bucket_is_named_before_anything_is_listed(s3_bucket):
    client, bucket = s3_bucket
    S3Source(client, bucket).check()  # exists: nothing to say
    with pytest.raises(SourceUnavailableError) as raised:
        S3Source(client, "no-such-bucket-here", "kb/").check()
    assert raised.value.transient is False
    assert str(raised.value) == (
        "source.bucket: bucket 'no-such-bucket-here' does not exist "
        "(s3://no-such-bucket-here/kb/ (*))"
    )


def test_a_missing_table_or_column_is_named_before_any_row_is_read(sql_table):
    url, name, _, _ = sql_table
    SqlSource(url, table=name, deleted_column="deleted").check()
    with pytest.raises(
        SourceUnavailableError, match=r"^source\.table: table 'no_such_table' "
    ) as missing:
        SqlSource(url, table="no_such_table").check()
    assert missing.value.transient is False
    with pytest.raises(SourceUnavailableError) as raised:
        SqlSource(url, table=name, body_column="content").check()
    assert str(raised.value).startswith("source.body_column: ")
    assert "has no column 'content'; it has body, deleted, id, title, updated_at" in str(
        raised.value
    )
    query = f"SELECT id, title, body FROM {name}"  # no updated_at
    with pytest.raises(SourceUnavailableError, match=r"^source\.updated_at_column: .*'updated_at'"):
        SqlSource(url, query=query).check()
    with pytest.raises(SourceUnavailableError, match=r"^source\.query: cannot run it") as bad:
        SqlSource(url, query="SELECT nonsense FROM nowhere").check()
    # SQLite says "no such table" as an OperationalError, as it says "database is locked":
    # only the second is worth trying again
    assert bad.value.transient is False


def test_a_tick_can_use_an_index_on_updated_at(sql_table):
    """With an index on updated_at, a tick's query is an index range scan (O(changes)):
    the plan is asked of the database itself, SQLite and PostgreSQL."""
    url, name, engine, table = sql_table
    rows = [
        {"id": n, "title": f"t{n}", "body": "b", "updated_at": T0 + timedelta(seconds=n)}
        for n in range(2000)
    ]
    with engine.begin() as conn:
        conn.execute(table.insert(), rows)
        conn.execute(sa.text(f"CREATE INDEX {name}_updated ON {name} (updated_at)"))
    source = SqlSource(url, table=name)
    state = source.changes_since(None).state  # the first tick reads everything once
    statement = source.changes_statement(state["updated_at"])
    compiled = statement.compile(engine, compile_kwargs={"literal_binds": True})
    explain = "EXPLAIN QUERY PLAN" if engine.dialect.name == "sqlite" else "EXPLAIN"
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SET enable_seqscan = off"))  # is the index usable at all?
        plan = " ".join(str(r[-1]) for r in conn.execute(sa.text(f"{explain} {compiled}")))
    assert f"INDEX {name}_updated (updated_at>?)" in plan or (
        f"{name}_updated" in plan and "Index Cond: (updated_at >=" in plan
    ), plan
    assert source.changes_since(state).changed == []  # nothing newer: nothing read
