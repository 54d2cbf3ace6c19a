"""The indexes a collection's tables carry, on real LanceDB with the FAKE embedder: every land
builds what is missing and folds its rows into the rest, so a one-document publish leaves no
row unindexed; the ANN index comes at `min_rows` and is retrained once the table outgrows
its training; a failed build leaves the land committed and names the index; a damaged index
is found and built again; queries answer while an index is rebuilt; search ranks by vector,
text or both."""

import threading
from pathlib import Path

import pytest

from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import open_partition
from batch_pipeline.index.search import CollectionNotIndexedError, search
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.table_indexes import VECTOR_INDEX, TableIndexes
from tests.support import many_articles


def config_with(tmp_path: Path, index: str = "", count: int = 80) -> Path:
    if not (tmp_path / "docs").exists():
        many_articles(tmp_path / "docs", count=count)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n"
        "  - name: handbook\n"
        "    source: {kind: filesystem, path: docs}\n"
        "    chunking: {max_tokens: 64, overlap_tokens: 0}\n"
        + (f"    index: {index}\n" if index else "")
    )
    return config


def partition(tmp_path: Path, index: str = "", count: int = 80) -> IndexPartition:
    config = load_config(config_with(tmp_path, index, count))
    return open_partition(config, resolve_storage(str(tmp_path / "home")), "handbook")


def names(pipeline: IndexPartition) -> set[str]:
    return {i.name for i in pipeline.store.open(pipeline.index).list_indices()}


def test_a_land_builds_the_full_text_indexes_and_leaves_the_small_table_to_a_flat_scan(
    tmp_path, fake_embedder
):
    pipeline = partition(tmp_path, count=8)
    landed = pipeline.run("run-1", fake_embedder)["land"]
    assert set(landed.summary.indexes.built) == {"text_idx", "title_idx"}
    assert names(pipeline) == {"text_idx", "title_idx"}  # under min_rows: no ANN index
    health = pipeline.product.index_health()
    assert health.ok and health.metadata()["unindexed_rows"] == 0


def test_the_ann_index_comes_at_min_rows_and_a_one_document_publish_leaves_none_unindexed(
    tmp_path, fake_embedder
):
    pipeline = partition(tmp_path, "{vector: {min_rows: 256}}")
    pipeline.run("run-1", fake_embedder)
    assert pipeline.store.count_rows(pipeline.index) >= 256
    assert names(pipeline) == {VECTOR_INDEX, "text_idx", "title_idx"}
    page = tmp_path / "docs" / "article-03.md"
    page.write_text(page.read_text() + "\n\nA new paragraph about error code E4242.\n")
    landed = pipeline.run("run-2", fake_embedder)["land"]
    assert (
        landed.summary.indexes.built == {} and landed.summary.indexes.folded
    )  # folded, not rebuilt
    states = [s for found in pipeline.product.index_health().states.values() for s in found]
    assert {s.name for s in states} == {VECTOR_INDEX, "text_idx", "title_idx"}
    assert all(s.present and s.unindexed_rows == 0 for s in states)  # none left unindexed
    hits = search(pipeline.product, "E4242", k=1, runner=fake_embedder, mode="text")
    assert hits[0].doc_id == "article-03.md"  # the new row is found through the index


def test_the_ann_index_is_retrained_once_the_table_outgrows_its_training(tmp_path, fake_embedder):
    pipeline = partition(tmp_path, "{vector: {min_rows: 256, rebuild_growth: 1.5}}")
    pipeline.run("run-1", fake_embedder)
    trained = pipeline.tracking.index_builds(pipeline.index)[VECTOR_INDEX].rows
    many_articles(tmp_path / "more", count=80)
    for page in (tmp_path / "more").iterdir():
        page.rename(tmp_path / "docs" / f"more-{page.name}")
    landed = pipeline.run("run-2", fake_embedder)["land"]
    reason = landed.summary.indexes.built[VECTOR_INDEX]
    assert f"from {trained:,} rows at training" in reason and "rebuild_growth 1.5" in reason
    assert pipeline.tracking.index_builds(pipeline.index)[VECTOR_INDEX].rows > trained


def test_a_failed_build_leaves_the_land_committed_and_names_the_index(
    tmp_path, fake_embedder, monkeypatch
):
    def fail(self, spec):  # noqa: ANN001, ANN202
        raise OSError("No space left on device")

    monkeypatch.setattr(TableIndexes, "_config", fail)
    pipeline = partition(tmp_path, count=8)
    landed = pipeline.run("run-1", fake_embedder)["land"]
    assert landed.summary.documents_landed == 8  # the rows are in
    assert set(landed.summary.indexes.failed) == {"text_idx", "title_idx"}
    health = pipeline.product.index_health(landed.summary.indexes)
    assert not health.ok
    assert any(p.startswith("text_idx: build failed: OSError") for p in health.problems)
    monkeypatch.undo()
    pipeline.run("run-2", fake_embedder)  # the next land builds them
    assert pipeline.product.index_health().ok


def test_a_damaged_index_is_found_and_built_again(tmp_path, fake_embedder):
    pipeline = partition(tmp_path, "{vector: {min_rows: 256}}")
    pipeline.run("run-1", fake_embedder)
    folder = Path(pipeline.store.table_uri(pipeline.index)) / "_indices"
    damaged = 0
    for path in folder.rglob("*"):
        if path.is_file():
            path.write_bytes(b"\0" * 64)  # a bad block over every index file
            damaged += 1
    assert damaged
    reader = partition(tmp_path, "{vector: {min_rows: 256}}")
    problems = reader.product.index_health().problems
    assert problems and all("damaged" in p for p in problems)
    query = "Article 7 covers topic 2"
    scanned = search(reader.product, query, k=1, runner=fake_embedder, mode="vector")
    assert scanned[0].doc_id == "article-07.md"  # the ANN index bypassed: an exact scan
    with pytest.raises(CollectionNotIndexedError, match="cannot be read"):
        search(reader.product, query, k=1, runner=fake_embedder, mode="text")
    assert search(reader.product, query, k=1, runner=fake_embedder)[0].doc_id == "article-07.md"
    landed = pipeline.run("run-2", fake_embedder)["land"]
    assert all(reason.startswith("damaged") for reason in landed.summary.indexes.built.values())
    assert pipeline.product.index_health().ok


def test_queries_answer_while_the_index_is_rebuilt(tmp_path, fake_embedder):
    pipeline = partition(tmp_path, "{vector: {min_rows: 256}}")
    pipeline.run("run-1", fake_embedder)
    expected = search(pipeline.product, "Article 7 covers topic 2", k=1, runner=fake_embedder)
    stop, errors = threading.Event(), []

    def rebuild() -> None:
        table = pipeline.store.open(pipeline.index)
        indexes = pipeline.product.indexes()
        while not stop.is_set():
            for spec in indexes.expected():
                table.create_index(
                    spec.column, config=indexes._config(spec), replace=True, name=spec.name
                )

    worker = threading.Thread(target=rebuild)
    worker.start()
    try:
        for _ in range(20):
            try:
                found = search(
                    pipeline.product, "Article 7 covers topic 2", k=1, runner=fake_embedder
                )
                assert found[0].doc_id == expected[0].doc_id
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(error)
    finally:
        stop.set()
        worker.join()
    assert not errors, errors[:3]


def test_search_ranks_by_vector_text_or_both(tmp_path, fake_embedder):
    pipeline = partition(tmp_path, count=12)
    page = tmp_path / "docs" / "article-05.md"
    page.write_text(page.read_text() + "\n\n## Errors\n\nSet retry_backoff_ms in billing.yaml.\n")
    pipeline.run("run-1", fake_embedder)
    text = search(pipeline.product, "retry_backoff_ms", k=3, runner=fake_embedder, mode="text")
    assert text[0].doc_id == "article-05.md" and "retry_backoff_ms" in text[0].text
    hybrid = search(pipeline.product, "retry_backoff_ms", k=3, runner=fake_embedder)  # the default
    assert hybrid[0].doc_id == "article-05.md"
    assert hybrid[0].score == pytest.approx(2 / 61, abs=1e-4)  # first in both rankings
    vector = search(pipeline.product, "Article 5", k=3, runner=fake_embedder, mode="vector")
    assert 0 < vector[0].score <= 1.0  # cosine similarity
    where = "doc_id != 'article-05.md'"
    filtered = search(
        pipeline.product, "retry_backoff_ms", k=3, runner=fake_embedder, mode="text", where=where
    )
    assert all(hit.doc_id != "article-05.md" for hit in filtered)


def test_text_search_without_its_index_says_so(tmp_path, fake_embedder):
    pipeline = partition(tmp_path, "{full_text: {enabled: false}, search: vector}", count=4)
    pipeline.run("run-1", fake_embedder)
    with pytest.raises(CollectionNotIndexedError, match="full-text index"):
        search(pipeline.product, "anything", runner=fake_embedder, mode="text")


def test_a_text_search_with_the_full_text_index_off_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match=r"collections\[0\]\.index.*full_text\.enabled"):
        load_config(config_with(tmp_path, "{full_text: {enabled: false}}", count=2))


def test_a_reader_s_service_opens_a_collection_and_searches_it_as_the_docs_say(
    tmp_path, fake_embedder
):
    from batch_pipeline.index.search import open_collection

    partition(tmp_path, count=6).run("run-1", fake_embedder)
    collection = open_collection("handbook", tmp_path / "pipeline.yaml", tmp_path / "home")
    hits = search(collection, "Article 4 covers topic 1", k=3, runner=fake_embedder)
    assert len(hits) == 3 and hits[0].doc_id == "article-04.md"
    assert [h.rank for h in hits] == [1, 2, 3]


def test_the_cli_says_what_it_built_searches_each_way_and_doctor_shows_the_indexes(
    tmp_path, capsys
):
    from batch_pipeline import cli

    config = config_with(tmp_path, count=6)
    base = ["--config", str(config), "--home", str(tmp_path / "home")]
    assert cli.main([*base, "run", "--collection", "handbook", "--run-id", "r1"]) == 0
    said = capsys.readouterr().out
    assert "index text_idx built: missing" in said and "index title_idx built: missing" in said
    for mode in ("vector", "text", "hybrid"):
        args = ["search", "Article 3 topic", "--collection", "handbook", "--mode", mode]
        assert cli.main([*base, *args]) == 0
        assert "article-03.md" in capsys.readouterr().out
    assert cli.main([*base, "doctor", "--product", "handbook"]) == 0
    assert "2 indexes, 0 rows unindexed" in capsys.readouterr().out
