"""Briefs on a sharded collection, with the FAKE generator: each shard's run briefs its own
documents and deletes only its own; the generation is complete once every shard had a full
pass (not before), and concurrent shard runs, serialised only at the landing commit, lose and
double nothing. A run of the whole collection covers every shard at once."""

import threading
from pathlib import Path

import pytest

from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.config import load_config
from batch_pipeline.index.product import open_partition
from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import many_articles, write_briefs_config

REPO = Path(__file__).resolve().parents[2]
SHARDS = [f"handbook-s{n:02d}" for n in range(4)]
ARTICLES = {f"article-{i:02d}.md" for i in range(24)}
NO_EMBEDDING = lambda model: pytest.fail("nothing to embed: no live index")  # noqa: E731


@pytest.fixture()
def sharded(tmp_path):
    many_articles(tmp_path / "docs")
    path = write_briefs_config(
        tmp_path, ", document_tokens: 40", collection="    shards: 4\n", glob=None
    )
    config = load_config(path)
    storage = resolve_storage(str(tmp_path / "home"))
    tracking = TrackingStore(storage.tracking_url)
    store = VectorStore(storage.lancedb_uri)
    documents = lambda key: open_partition(config, storage, key, tracking, store)  # noqa: E731
    product = BriefProduct(
        config, storage, "handbook", FakeGenerator(), documents, None, tracking, store
    )
    return product, tmp_path / "docs"


def run(product: BriefProduct, key: str, run_id: str) -> dict:
    return product.partition(key).run(run_id, lambda: product.generator)


def briefed(product: BriefProduct) -> dict[str, str]:
    """doc_id -> the partition its brief was generated in."""
    return {r["doc_id"]: r["partition"] for r in product.briefs.rows(product.index)}


def test_each_shard_briefs_its_own_documents_and_the_last_full_pass_completes_it(sharded):
    product, _ = sharded
    collection = product.collection
    for n, shard in enumerate(SHARDS[:3]):
        run(product, shard, f"run-{n}")
    record = product.registry.get(product.name, product.fingerprint)
    assert not record.full_pass  # one shard has had no pass yet
    review = product.review(NO_EMBEDDING)
    assert review.decision != "promoted" and "full pass" in review.reason
    run(product, SHARDS[3], "run-3")
    by_doc = briefed(product)
    assert set(by_doc) == ARTICLES and len(product.briefs.rows(product.index)) == 24
    assert all(partition == collection.partition_of(d) for d, partition in by_doc.items())
    record = product.registry.get(product.name, product.fingerprint)
    assert (record.full_pass, record.documents, record.rows) == (True, 24, 24)
    review = product.review(NO_EMBEDDING)
    assert review.decision == "promoted", review.reason


def test_a_shard_deletes_only_its_own_documents_briefs(sharded):
    product, docs = sharded
    for n, shard in enumerate(SHARDS):
        run(product, shard, f"run-{n}")
    gone = "article-05.md"
    owner = product.collection.partition_of(gone)
    other = next(s for s in SHARDS if s != owner)
    (docs / gone).unlink()
    landed = run(product, other, "run-other")["land"]
    assert landed.summary.deleted_ids == [] and gone in briefed(
        product
    )  # not another shard's to delete
    landed = run(product, owner, "run-owner")["land"]
    assert landed.summary.deleted_ids == [gone]
    assert set(briefed(product)) == ARTICLES - {gone}
    record = product.registry.get(product.name, product.fingerprint)
    assert (record.documents, record.rows) == (23, 23)


def test_an_emptied_shard_holds_its_deletions_against_its_own_share(sharded):
    product, docs = sharded
    for n, shard in enumerate(SHARDS):
        run(product, shard, f"run-{n}")
    shard = SHARDS[0]
    mine = [d for d in ARTICLES if product.collection.partition_of(d) == shard]
    for doc_id in mine:  # a quarter of the collection, all of the shard
        (docs / doc_id).unlink()
    landed = run(product, shard, "run-empty")["land"]
    assert landed.deletions_held == len(mine) and landed.summary.deleted_ids == []
    assert set(briefed(product)) == ARTICLES


def test_concurrent_shard_runs_lose_and_double_nothing(sharded):
    product, _ = sharded
    errors: list[BaseException] = []

    def one(shard: str) -> None:
        try:
            run(product, shard, f"run-{shard}")
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=one, args=(shard,)) for shard in SHARDS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    rows = product.briefs.rows(product.index)
    assert sorted(r["doc_id"] for r in rows) == sorted(ARTICLES)  # none lost, none doubled
    record = product.registry.get(product.name, product.fingerprint)
    assert (record.full_pass, record.documents) == (True, 24)


def test_a_run_of_the_whole_collection_covers_every_shard(sharded):
    product, _ = sharded
    run(product, "handbook", "run-whole")
    record = product.registry.get(product.name, product.fingerprint)
    assert (record.full_pass, record.documents, record.rows) == (True, 24, 24)
    run(product, SHARDS[1], "run-shard")  # a shard's pass after it keeps the others' counts
    record = product.registry.get(product.name, product.fingerprint)
    assert (record.full_pass, record.documents) == (True, 24)
