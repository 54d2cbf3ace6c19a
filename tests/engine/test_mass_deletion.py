"""A run that would delete most of a partition (an unmounted volume, a mistyped prefix, a
query that suddenly returns nothing) lands everything else, holds those deletions back,
says why, and deletes them only once confirmed; with the folder, S3 and SQL sources."""

import datetime as dt
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from batch_pipeline import cli
from batch_pipeline.config import load_config
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import open_partition
from batch_pipeline.runs.landing import DeletionGuard
from batch_pipeline.state.storage import resolve_storage
from tests.support import POSTGRES_URL

DOCS = {f"page-{n}.md": f"# Page {n}\n\nAll about topic {n}.\n" for n in range(4)}
NEW = ("fresh.md", "# Fresh\n\nA page added while the others vanished.\n")


class Folder:
    def __init__(self, tmp_path: Path, **_: object) -> None:
        self.root = tmp_path / "docs"
        self.root.mkdir()
        self.source = f"{{kind: filesystem, path: {self.root}, glob: '*.md'}}"

    def put(self, name: str, text: str) -> None:
        (self.root / name).write_text(text)

    def remove(self, name: str) -> None:
        (self.root / name).unlink()


class Bucket:
    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest, **_: object) -> None:
        self.client, self.bucket = request.getfixturevalue("s3_bucket")
        endpoint = request.getfixturevalue("moto_server")
        self.source = (
            f"{{kind: s3, bucket: {self.bucket}, prefix: kb/, endpoint_url: '{endpoint}', "
            "region: us-east-1}"
        )

    def put(self, name: str, text: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"kb/{name}", Body=text.encode())

    def remove(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"kb/{name}")


class Table:
    def __init__(self, tmp_path: Path, url: str, **_: object) -> None:
        import uuid

        self.engine = sa.create_engine(url)
        self.table = sa.Table(
            f"pages_{uuid.uuid4().hex[:10]}",
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("title", sa.Text),
            sa.Column("body", sa.Text),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        )
        self.table.create(self.engine)
        self.source = f"{{kind: sql, url: '{url}', table: {self.table.name}, format: markdown}}"
        self.ids: dict[str, int] = {}

    def put(self, name: str, text: str) -> None:
        self.ids.setdefault(name, len(self.ids) + 1)
        now = dt.datetime.now(dt.UTC)
        with self.engine.begin() as conn:
            conn.execute(
                self.table.insert(),
                [{"id": self.ids[name], "title": name, "body": text, "updated_at": now}],
            )

    def remove(self, name: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.delete(self.table).where(self.table.c.id == self.ids[name]))

    def close(self) -> None:
        self.table.drop(self.engine)
        self.engine.dispose()


@pytest.fixture(params=["folder", "s3", "sqlite", "postgresql"])
def source(request, tmp_path):
    # (the S3 case's credentials are the session's moto_server's: a monkeypatch here would
    # take them away from every later test when it undoes itself)
    if request.param == "folder":
        made = Folder(tmp_path)
    elif request.param == "s3":
        made = Bucket(tmp_path, request=request)
    else:
        url = f"sqlite:///{tmp_path / 'cms.db'}" if request.param == "sqlite" else POSTGRES_URL
        made = Table(tmp_path, url=url)
    for name, text in DOCS.items():
        made.put(name, text)
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"collections:\n  - name: kb\n    source: {made.source}\n")
    made.config = config
    made.home = tmp_path / "home"
    yield made
    if isinstance(made, Table):
        made.close()


def engine_for(source) -> IndexPartition:  # noqa: ANN001
    return open_partition(load_config(source.config), resolve_storage(str(source.home)), "kb")


def test_an_emptied_source_lands_the_rest_and_holds_the_deletions(source, fake_embedder):
    pipeline = engine_for(source)
    pipeline.run("run-1", fake_embedder)
    rows_before = pipeline.store.stats(pipeline.index).rows
    for name in DOCS:
        source.remove(name)
    source.put(*NEW)

    landed = engine_for(source).run("run-2", fake_embedder)["land"]
    assert landed.summary.documents_landed == 1 and landed.summary.documents_deleted == 0
    assert landed.deletions_held == 4
    assert landed.deletions_held_reason == (
        "the run would delete 4 of 4 landed documents of kb (100%), "
        "more than limits.max_delete_fraction (0.5)"
    )
    stats = pipeline.store.stats(pipeline.index)
    assert stats.documents == 5 and stats.rows > rows_before  # nothing was deleted
    (record,) = pipeline.tracking.runs_with_id("run-2")
    assert record["deletions_held"] == 4
    assert pipeline.tracking.freshness(pipeline.index)["pending"] == 4

    confirmed = engine_for(source).run("run-3", fake_embedder, allow_mass_delete=True)["land"]
    assert confirmed.summary.documents_deleted == 4 and confirmed.deletions_held == 0
    assert pipeline.store.stats(pipeline.index).documents == 1
    assert pipeline.tracking.freshness(pipeline.index)["pending"] == 0


def test_deleting_less_than_the_limit_needs_no_confirmation(source, fake_embedder):
    engine_for(source).run("run-1", fake_embedder)
    source.remove("page-0.md")  # 1 of 4: 25%
    landed = engine_for(source).run("run-2", fake_embedder)["land"]
    assert landed.summary.documents_deleted == 1 and landed.deletions_held == 0


def test_replacing_a_few_old_documents_by_many_new_ones_is_no_mass_deletion(source, fake_embedder):
    engine_for(source).run("run-1", fake_embedder)
    for name in DOCS:  # every old page goes (100% of what it held) ...
        source.remove(name)
    for n in range(12):  # ... while twelve new ones come: 4 of the 12 it will hold
        source.put(f"new-{n:02d}.md", f"# New {n}\n\nA new page, number {n}.\n")
    landed = engine_for(source).run("run-2", fake_embedder)["land"]
    assert landed.deletions_held == 0 and landed.summary.documents_deleted == 4
    assert landed.summary.documents_landed == 12


def test_the_cli_exits_3_and_says_how_to_confirm(source, fake_embedder, capsys, monkeypatch):
    from batch_pipeline.inference import fake
    from batch_pipeline.inference import runner as runner_module

    # the CLI loads models through LoadedModels, which builds runner_module.EmbeddingRunner
    monkeypatch.setattr(
        runner_module, "EmbeddingRunner", lambda model, **_: fake.FakeEmbedder(model)
    )
    base = ["--config", str(source.config), "--home", str(source.home), "run"]
    assert cli.main([*base, "--collection", "kb"]) == 0
    for name in DOCS:
        source.remove(name)
    capsys.readouterr()
    assert cli.main([*base, "--collection", "kb", "--json"]) == 3
    out, err = capsys.readouterr()
    assert json.loads(out)["land"]["deletions_held"] == 4
    assert err.startswith("batch-pipeline: held back 4 deletions: the run would delete 4 of 4")
    assert "--allow-mass-delete" in err and "allow_mass_delete: true" in err
    assert cli.main([*base, "--collection", "kb", "--allow-mass-delete", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["land"]["documents_deleted"] == 4


def test_the_guard_weighs_both_limits():
    def guard(fraction, documents=None, landed=10, confirmed=False):  # noqa: ANN001, ANN202
        return DeletionGuard(fraction, documents, lambda: landed, confirmed)

    assert guard(0.5).refusal(5) is None  # exactly half is allowed
    assert "max_delete_fraction (0.5)" in guard(0.5).refusal(6)
    assert "max_delete_documents (2)" in guard(1.0, documents=2).refusal(3)
    assert guard(1.0, documents=2).refusal(2) is None
    assert guard(0.5, confirmed=True).refusal(10) is None
    assert guard(0.5).refusal(0) is None
    # weighed against what the partition will hold as well as what it holds
    assert guard(0.5, landed=1).refusal(1, adding=1000) is None  # 1 old out, 1000 new in
    assert guard(0.5, landed=10).refusal(6, adding=4) is not None  # 6 of the 10 it holds
    assert guard(0.5, landed=10).refusal(6, adding=10) is None  # 6 of the 14 it will hold
    assert "(100%)" in guard(0.5, landed=1000).refusal(1000)  # an empty listing still is
    asked = []
    lazy = DeletionGuard(0.5, None, lambda: asked.append(1) or 10)
    assert lazy.refusal(0) is None and asked == []  # nothing to delete: no count is taken
