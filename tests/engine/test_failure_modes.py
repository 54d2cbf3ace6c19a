"""Garbage in, hostile ids, quarantine and completeness: every claim of README's Failure modes."""

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from batch_pipeline.config import load_config
from batch_pipeline.health.completeness import partition_completeness
from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.pipeline import PartitionPipeline
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
    plan = pipeline.plan("run-1", chunks.path, PlanSettings())
    embeddings = pipeline.execute("run-1", plan.path, lambda: runner)
    dim = pipeline.model.embedding_dimension
    pipeline.land("run-1", collected.path, chunks.path, embeddings.path, dim)
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
    pipeline = PartitionPipeline(load_config(config), resolve_storage(str(tmp_path / "h")), "cms")
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
    assert out["land"].documents_deleted == 1 and out["land"].documents_landed == 1
    assert doc_ids(pipeline) == ({*HOSTILE, "plain"} - {"a' OR 1=1 --"})
    assert pipeline.tracking.document_count(pipeline.index) == len(HOSTILE)
