"""A fourth product, declared outside the engine, works as the built-in three do.

`tests/lengths/` is docs/layout.md's "Adding a product" followed to the letter: a small
product (each document of a collection in a size bucket, scored against labelled buckets)
in a folder of its own. Nothing else in the repository names it; a configuration declares it
(`products:`). These tests use it as a user would: the CLI's `run`, `status`, `doctor`,
`report`, `failures` and `generations`, and the frame's policies (the mass-deletion guard,
`every_run`, retention), with no edit elsewhere.
"""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from batch_pipeline.cli import main
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.generations.registry import DROPPED, LIVE, RETIRED
from batch_pipeline.products import configured_products, kinds_for
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.lengths.executor import bucket_of
from tests.support import write_corpus

PRODUCT = "handbook_lengths"
BOUNDS = [100, 200]


def write_workspace(
    root: Path, buckets: list[int] = BOUNDS, extra: str = "", labels: list[int] | None = None
) -> Path:
    """The collection, and its labelled buckets by `labels` (default: `buckets`) bounds."""
    docs = root / "docs"
    if not docs.exists():
        write_corpus(docs)
    bounds = labels or buckets
    files = [p for p in sorted(docs.rglob("*")) if p.is_file() and p.stat().st_size]
    labelled = [
        {"doc_id": p.relative_to(docs).as_posix(), "bucket": bucket_of(p.stat().st_size, bounds)}
        for p in files
    ]
    (root / "labelled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labelled))
    config = root / "pipeline.yaml"
    config.write_text(
        "collections:\n"
        "  - name: handbook\n"
        '    source: {kind: filesystem, path: docs, glob: "**/*"}\n'
        "products:\n"
        "  lengths:\n"
        "    declaration: tests.lengths.kind:LENGTHS\n"
        "    collections: [handbook]\n"
        f"    buckets: {buckets}\n"
        "    labelled: labelled.jsonl\n" + extra
    )
    return config


def cli(capsys, root: Path, *args: str) -> tuple[int, str]:  # noqa: ANN001
    code = main(["--config", str(root / "pipeline.yaml"), "--home", str(root / "home"), *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def run(capsys, root: Path, *extra: str) -> tuple[int, dict]:  # noqa: ANN001
    code, out = cli(
        capsys, root, "run", "--kind", "lengths", "--collection", "handbook", "--json", *extra
    )
    return code, json.JSONDecoder().raw_decode(out[out.index("{") :])[0] if "{" in out else {}


def opened(root: Path):  # noqa: ANN201 - the product, behind its face
    config = load_config(root / "pipeline.yaml")
    storage = resolve_storage(str(root / "home"))
    tracking, store = TrackingStore(storage.tracking_url), VectorStore(storage.lancedb_uri)
    (product,) = configured_products(config, storage, tracking, store, PRODUCT)
    return product


def test_a_configuration_declares_the_kind_and_a_bad_section_fails_at_load(tmp_path):
    config = load_config(write_workspace(tmp_path))
    assert [kind.name for kind in kinds_for(config)] == [
        "index",
        "briefs",
        "related",
        "tickets",
        "lengths",
    ]
    write_workspace(tmp_path, buckets=[200, 100])
    with pytest.raises(ConfigError, match=r"products: lengths\.buckets: .*ascending"):
        load_config(tmp_path / "pipeline.yaml")
    text = (tmp_path / "pipeline.yaml").read_text().replace("[200, 100]", "[100]")
    for wrong, said in (
        ("tests.lengths.kind:NOPE", "has no 'NOPE'"),
        ("tests.nowhere:LENGTHS", "cannot import 'tests.nowhere'"),
        ("tests.lengths.kind:NAME", "is not a ProductKind"),
    ):
        (tmp_path / "pipeline.yaml").write_text(text.replace("tests.lengths.kind:LENGTHS", wrong))
        with pytest.raises(ConfigError, match=rf"products: lengths\.declaration: .*{said}"):
            load_config(tmp_path / "pipeline.yaml")
    (tmp_path / "pipeline.yaml").write_text(text.replace("  lengths:\n", "  sizes:\n"))
    with pytest.raises(ConfigError, match="declares the kind 'lengths', not 'sizes'"):
        load_config(tmp_path / "pipeline.yaml")


def test_a_declared_kind_cannot_take_a_built_in_kind_s_name_or_a_product_s(tmp_path, monkeypatch):
    import dataclasses

    from tests.lengths import kind as lengths_kind

    text = write_workspace(tmp_path).read_text()
    monkeypatch.setattr(
        lengths_kind,
        "AS_INDEX",
        dataclasses.replace(lengths_kind.LENGTHS, name="index"),
        raising=False,
    )
    (tmp_path / "pipeline.yaml").write_text(
        text.replace("  lengths:\n", "  index:\n").replace(":LENGTHS", ":AS_INDEX")
    )
    with pytest.raises(ConfigError, match="products.index: 'index' is a built-in kind's name"):
        kinds_for(load_config(tmp_path / "pipeline.yaml"))
    # a collection named as the product would be: the names key their generations
    (tmp_path / "pipeline.yaml").write_text(
        text.replace(
            "- name: handbook\n",
            "- name: handbook\n"
            '    source: {kind: filesystem, path: docs, glob: "**/*"}\n'
            "  - name: handbook_lengths\n",
            1,
        )
    )
    with pytest.raises(ConfigError, match="'handbook_lengths' would name a product of kind"):
        configured_products(load_config(tmp_path / "pipeline.yaml"), None, None, None)


def test_every_command_covers_the_declared_product(tmp_path, capsys):
    write_workspace(tmp_path)
    (tmp_path / "docs" / "empty.md").write_text("")  # an input the product fails on

    code, first = run(capsys, tmp_path)
    assert code == 0
    assert first["product"] == PRODUCT
    assert first["land"]["documents_landed"] == 3 and first["land"]["documents_failed"] == 1
    assert first["measures"]["failure_rate"] == 0.25  # the frame measured the run
    assert first["generation"]["decision"] == "refused"  # one document has no bucket
    assert "1 documents unbucketed" in first["generation"]["reason"]

    code, out = cli(capsys, tmp_path, "failures", "--product", PRODUCT)
    assert "'empty.md'" in out and "unreadable" in out
    code, out = cli(capsys, tmp_path, "doctor", "--product", PRODUCT)
    assert code == 1 and "no live generation yet" in out

    (tmp_path / "docs" / "empty.md").write_text("# Now it has a line\n")
    code, second = run(capsys, tmp_path)
    assert second["land"]["documents_landed"] == 1  # only what changed
    assert second["generation"]["decision"] == "promoted"
    assert second["generation"]["candidate_bucket_accuracy"] == 1.0

    code, out = cli(capsys, tmp_path, "status")
    assert f"{PRODUCT} (document lengths of handbook): 4 of 4 documents bucketed" in out
    assert out.startswith("COLLECTION") and "\nhandbook " in out  # its index, beside it
    code, out = cli(capsys, tmp_path, "doctor", "--product", PRODUCT)
    assert code == 0 and f"{PRODUCT}: healthy; 4 of 4 bucketed" in out
    code, out = cli(capsys, tmp_path, "failures", "--product", PRODUCT)
    assert "no failures" in out  # the landed document's failure is forgotten
    code, out = cli(capsys, tmp_path, "generations", "list", "--product", PRODUCT)
    assert code == 0 and f"{PRODUCT}  " in out and " live " in out
    code, out = cli(capsys, tmp_path, "report", "--product", PRODUCT, "--json")
    assert code == 0 and json.loads(out)["runs"][0]["partition"] == "handbook"

    code, out = cli(capsys, tmp_path, "run", "--product", PRODUCT)  # by name, in text
    assert code == 0 and f"of {PRODUCT}: 0 documents landed" in out


def test_the_frames_policies_cover_it(tmp_path, capsys):
    write_workspace(tmp_path, extra="generations: {review: every_run}\n")
    assert run(capsys, tmp_path)[1]["generation"]["decision"] == "promoted"
    again = run(capsys, tmp_path)[1]["generation"]
    assert again["evaluated"] is True  # every_run: reviewed although nothing changed

    # the mass-deletion guard: a source that lists nothing deletes nothing
    for path in (tmp_path / "docs").rglob("*"):
        if path.is_file():
            path.unlink()
    code, held = run(capsys, tmp_path)
    assert code == 3
    assert held["land"]["deletions_held"] == 3
    assert opened(tmp_path).product.store.count_rows(opened(tmp_path).index) == 3
    code, confirmed = run(capsys, tmp_path, "--allow-mass-delete")
    assert code == 0 and confirmed["land"]["documents_deleted"] == 3

    # retention: a new configuration's generation replaces live; the old one, retired past
    # generations.retention_days, is dropped by the reviewer
    write_corpus(tmp_path / "docs")
    write_workspace(tmp_path, extra="generations: {review: every_run}\n")
    run(capsys, tmp_path)
    old = opened(tmp_path)
    write_workspace(tmp_path, buckets=[50, 150, 400], labels=BOUNDS)  # the set disagrees
    assert run(capsys, tmp_path)[1]["generation"]["decision"] == "refused"  # the gate holds
    write_workspace(tmp_path, buckets=[50, 150, 400])
    assert run(capsys, tmp_path)[1]["generation"]["decision"] == "promoted"
    new = opened(tmp_path)
    states = {g.fingerprint: g.state for g in new.reviewer.registry.list_all(PRODUCT)}
    assert states == {old.fingerprint: RETIRED, new.fingerprint: LIVE}
    assert new.reviewer.drop_retired() == []  # not yet past retention
    dropped = new.reviewer.drop_retired(now=datetime.now(UTC) + timedelta(days=30))
    assert dropped == [old.index]
    assert not new.product.store.has_table(old.index)
    assert new.reviewer.registry.get(PRODUCT, old.fingerprint).state == DROPPED


def test_a_declared_feed_into_the_index_is_resolved_by_the_frame(tmp_path, monkeypatch):
    """A kind declares rows it keeps beside the index's generations (`Feed`), as the briefs
    declare their questions: the index, which names no other product, drops that table with
    its generation and reads it only while the configuration writes it."""
    import dataclasses

    import pyarrow as pa

    from batch_pipeline.declaration import Feed, feed_tables
    from batch_pipeline.index.product import open_partition
    from tests.lengths import kind as lengths_kind

    writes = {"on": True}
    feed = Feed(into="index", suffix="_sizes", writes=lambda config, name: writes["on"])
    feeding = dataclasses.replace(lengths_kind.LENGTHS, feeds=(feed,))
    monkeypatch.setattr(lengths_kind, "FEEDING", feeding, raising=False)
    text = write_workspace(tmp_path).read_text().replace(":LENGTHS", ":FEEDING")
    (tmp_path / "pipeline.yaml").write_text(text)
    config = load_config(tmp_path / "pipeline.yaml")
    storage = resolve_storage(str(tmp_path / "home"))
    store = VectorStore(storage.lancedb_uri)
    index = open_partition(config, storage, "handbook", TrackingStore(storage.tracking_url), store)
    beside = index.index.replace("handbook__", "handbook_sizes__")
    questions = index.index.replace("handbook__", "handbook_questions__")  # the briefs' feed
    assert index.product.feed_tables(index.index) == [questions, beside]
    assert index.product.feed_tables(index.index, written=True) == [beside]  # the briefs are off
    writes["on"] = False  # read only while written; dropped and checked always
    assert index.product.feed_tables(index.index, written=True) == []
    assert feed_tables(config, "tickets", "handbook", index.index) == []  # it feeds the index
    store.create_table(beside, pa.schema([("doc_id", pa.string())]))
    index.product.drop_tables(index.index)
    assert not store.has_table(beside)


def test_a_kind_reads_another_s_live_generation_only_as_a_declared_input(tmp_path):
    from batch_pipeline.declaration import input_product

    config = load_config(write_workspace(tmp_path))
    assert input_product(config, "briefs", "index", "handbook") == "handbook"
    with pytest.raises(ConfigError, match="the lengths kind reads no index generation"):
        input_product(config, "lengths", "index", "handbook")
