"""Document metadata on every row without re-embedding: Markdown front matter, S3 object
metadata and SQL metadata columns; declared fields typed, the rest as JSON; `--where`."""

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from batch_pipeline import cli
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.index.search import WhereError, search
from tests.support import write_config

FIELDS = "metadata: {fields: {product: string, priority: int, public: bool}}"
PAGE = """---
title: Refund policy
product: billing
priority: 2
public: yes
url: https://example.com/refunds
---
# Refund policy

Annual plans can be refunded within 30 days of purchase. Monthly plans are not refunded.
"""


def with_fields(config, source: str = "docs"):  # noqa: ANN001, ANN201
    text = write_config(config, source=source).read_text()
    config.write_text(text.replace("    source:", f"    {FIELDS}\n    source:"))
    return config


def rows_by_doc(pipeline, doc_id: str) -> list[dict]:  # noqa: ANN001
    table = pipeline.store.open(pipeline.index).to_arrow().to_pylist()
    return sorted((r for r in table if r["doc_id"] == doc_id), key=lambda r: r["chunk_id"])


def test_front_matter_fills_typed_columns_and_a_change_to_it_alone_embeds_nothing(
    workspace, make_pipeline, runner
):
    (workspace["docs"] / "refunds.md").write_text(PAGE)
    with_fields(workspace["config"])
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    rows = rows_by_doc(pipeline, "refunds.md")
    assert rows and {(r["product"], r["priority"], r["public"]) for r in rows} == {
        ("billing", 2, True)
    }
    assert json.loads(rows[0]["metadata"]) == {
        "title": "Refund policy",
        "url": "https://example.com/refunds",
    }
    version = pipeline.store.open(pipeline.index).version

    (workspace["docs"] / "refunds.md").write_text(PAGE.replace("billing", "accounts"))
    out = make_pipeline().run("run-2", runner)
    assert out["execute"].stats.inputs == 0  # the model inputs did not change
    after = rows_by_doc(pipeline, "refunds.md")
    assert {r["product"] for r in after} == {"accounts"}
    assert [r["vector"] for r in after] == [r["vector"] for r in rows]
    assert {r["run_id"] for r in after} == {"run-1"}  # the vectors' lineage is kept
    assert out["land"].summary.table_version == version + 1  # one commit (then the index upkeep)


def test_search_filters_on_declared_fields_and_shows_metadata(workspace, make_pipeline, runner):
    (workspace["docs"] / "refunds.md").write_text(PAGE)
    with_fields(workspace["config"])
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    hits = search(pipeline.product, "refund", k=5, runner=runner, where="product = 'billing'")
    assert hits and {h.doc_id for h in hits} == {"refunds.md"}
    assert hits[0].metadata["product"] == "billing"
    assert hits[0].metadata["url"] == "https://example.com/refunds"
    both = search(
        pipeline.product, "refund", runner=runner, where="priority >= 2 AND public = true"
    )
    assert {h.doc_id for h in both} == {"refunds.md"}
    assert search(pipeline.product, "refund", runner=runner, where="product = 'accounts'") == []
    # hostile values are escaped literals: they match nothing and break nothing
    for value in ("x' OR '1'='1", "billing'; DROP TABLE x; --", "a\\\\' OR 1=1"):
        literal = "'" + value.replace("'", "''") + "'"
        assert search(pipeline.product, "refund", runner=runner, where=f"product = {literal}") == []
    for bad in ("vector = 'x'", "product = 1", "product = 'a' OR priority = 1", "1 = 1"):
        with pytest.raises(WhereError):
            search(pipeline.product, "refund", runner=runner, where=bad)
    assert pipeline.store.count_rows(pipeline.index) > 0  # nothing was dropped


def test_the_cli_searches_with_where_and_prints_metadata(workspace, make_pipeline, runner, capsys):
    (workspace["docs"] / "refunds.md").write_text(PAGE)
    with_fields(workspace["config"])
    make_pipeline().run("run-1", runner)
    base = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    code = cli.main(
        [*base, "search", "refund", "--collection", "handbook", "--where", "product = 'billing'"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "refunds.md" in out and "product=billing" in out
    assert cli.main([*base, "search", "refund", "--collection", "handbook", "--where", "nope = 1"])
    assert "unknown field 'nope'" in capsys.readouterr().err


def test_declaring_a_field_later_fills_it_on_the_next_full_run_without_embedding(
    workspace, make_pipeline, runner
):
    (workspace["docs"] / "refunds.md").write_text(PAGE)
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    assert "product" not in pipeline.store.open(pipeline.index).schema.names
    with_fields(workspace["config"])
    out = make_pipeline().run("run-2", runner)
    assert out["execute"].stats.inputs == 0
    assert {r["product"] for r in rows_by_doc(pipeline, "refunds.md")} == {"billing"}


def test_sql_metadata_columns_reach_the_rows_and_a_change_to_them_embeds_nothing(
    sql_url, tmp_path, runner
):
    from batch_pipeline.index.product import open_partition
    from batch_pipeline.state.storage import resolve_storage

    name = f"articles_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(sql_url)
    table = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("title", sa.Text),
        sa.Column("body", sa.Text),
        sa.Column("product", sa.Text),
        sa.Column("language", sa.Text),
        sa.Column("updated_at", sa.DateTime(timezone=True)),
    )
    table.create(engine)
    try:
        now = datetime.now(UTC)
        with engine.begin() as conn:
            conn.execute(
                table.insert().values(
                    id=1,
                    title="Refunds",
                    body="Annual plans are refunded within 30 days.",
                    product="billing",
                    language="en",
                    updated_at=now,
                )
            )
        config = tmp_path / "pipeline.yaml"
        config.write_text(
            f"""collections:
  - name: articles
    metadata: {{fields: {{product: string}}}}
    source: {{kind: sql, url: '{sql_url}', table: {name}, metadata_columns: [product, language]}}
"""
        )
        storage = resolve_storage(str(tmp_path / "home"))
        pipeline = open_partition(load_config(config), storage, "articles")
        pipeline.run("run-1", runner)
        (row,) = pipeline.store.open(pipeline.index).to_arrow().to_pylist()
        assert row["product"] == "billing" and json.loads(row["metadata"]) == {"language": "en"}
        with engine.begin() as conn:
            conn.execute(
                table.update().values(product="accounts", updated_at=now + timedelta(seconds=5))
            )
        pipeline = open_partition(load_config(config), storage, "articles")
        out = pipeline.run("run-2", runner)
        assert out["execute"].stats.inputs == 0
        (row,) = pipeline.store.open(pipeline.index).to_arrow().to_pylist()
        assert row["product"] == "accounts" and row["run_id"] == "run-1"
        config.write_text(config.read_text().replace("[product, language]", "[product, lang]"))
        broken = open_partition(load_config(config), storage, "articles")
        with pytest.raises(Exception, match="source.metadata_columns: .* has no column 'lang'"):
            broken.collect("run-3")
    finally:
        table.drop(engine)
        engine.dispose()


def test_s3_object_metadata_reaches_the_rows(s3_bucket, moto_server, tmp_path, runner):
    from batch_pipeline.index.product import open_partition
    from batch_pipeline.state.storage import resolve_storage

    client, bucket = s3_bucket
    client.put_object(
        Bucket=bucket,
        Key="kb/refunds.md",
        Body=b"# Refunds\n\nAnnual plans are refunded within 30 days.\n",
        Metadata={"product": "billing", "owner": "finance"},
    )
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""collections:
  - name: kb
    metadata: {{fields: {{product: string}}}}
    source: {{kind: s3, bucket: {bucket}, prefix: kb/, endpoint_url: '{moto_server}'}}
"""
    )
    pipeline = open_partition(load_config(config), resolve_storage(str(tmp_path / "h")), "kb")
    pipeline.run("run-1", runner)
    (row,) = pipeline.store.open(pipeline.index).to_arrow().to_pylist()
    assert row["product"] == "billing" and json.loads(row["metadata"]) == {"owner": "finance"}
    # a copy onto itself with new metadata only: same bytes, same ETag, a new LastModified
    time.sleep(1.1)
    client.copy_object(
        Bucket=bucket,
        Key="kb/refunds.md",
        CopySource={"Bucket": bucket, "Key": "kb/refunds.md"},
        Metadata={"product": "accounts", "owner": "finance"},
        MetadataDirective="REPLACE",
    )
    pipeline = open_partition(load_config(config), resolve_storage(str(tmp_path / "h")), "kb")
    out = pipeline.run("run-2", runner)
    assert out["execute"].stats.inputs == 0
    (row,) = pipeline.store.open(pipeline.index).to_arrow().to_pylist()
    assert row["product"] == "accounts" and row["run_id"] == "run-1"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("{doc_id: string}", "'doc_id' is a column every table already has"),
        ("{Product: string}", "'Product': a field name is a lowercase letter"),
        ("{product: text}", "Input should be 'string', 'int', 'float' or 'bool'"),
    ],
)
def test_bad_metadata_fields_fail_at_load_naming_the_field(workspace, fields, message):
    text = write_config(workspace["config"]).read_text()
    workspace["config"].write_text(
        text.replace("    source:", f"    metadata: {{fields: {fields}}}\n    source:")
    )
    with pytest.raises(ConfigError, match=r"collections\[0\]\.metadata\.fields") as error:
        load_config(workspace["config"])
    assert message in str(error.value)
