"""One word per idea: collection, partition and generation names, the stage table, how a
planned run splits into per-partition run requests, and no two of the engine's classes under
one name."""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from batch_pipeline.config import parse_config
from batch_pipeline.iterables import batched
from batch_pipeline.names import (
    generation_fingerprint,
    generation_index,
    generation_product,
    shard_number,
    shard_of,
    shard_partition,
)
from batch_pipeline.stages import STAGES
from batch_pipeline.triggers.publish import PlannedRun, partition_runs


@pytest.mark.parametrize("collection", ["handbook", "a", "a__b", "kb_2026"])
def test_a_generation_names_its_collection_and_fingerprint(collection):
    index = generation_index(collection, "68b2134ad1c0fff7")
    assert generation_product(index) == collection
    assert generation_fingerprint(index) == "68b2134ad1c0fff7"


@pytest.mark.parametrize("bad", ["handbook", "__abc", "handbook__", ""])
def test_a_name_that_is_not_a_generation_is_refused(bad):
    with pytest.raises(ValueError, match="not a generation name"):
        generation_product(bad)


def test_shard_partitions_round_trip():
    assert shard_partition("handbook", 3) == "handbook-s03"
    assert shard_number("handbook-s03") == 3


def config(shards: int):
    return parse_config(
        {
            "collections": [
                {"name": "kb", "shards": shards, "source": {"kind": "filesystem", "path": "."}}
            ]
        },
        base_dir=".",
    )


def test_a_document_belongs_to_exactly_the_partition_its_hash_picks():
    collection = config(4).collections[0]
    ids = [f"doc-{n}.md" for n in range(200)]
    owners = {collection.partition_of(d) for d in ids}
    assert owners == set(collection.partition_keys())
    for doc_id in ids:
        assert collection.partition_of(doc_id) == f"kb-s{shard_of(doc_id, 4):02d}"
    assert config(1).collections[0].partition_of("anything") == "kb"


def test_a_targeted_run_splits_by_partition_with_stable_keys():
    collection = config(4).collections[0]
    changed = [f"doc-{n}.md" for n in range(12)]
    run = PlannedRun("kb:abc", changed, ["gone.md"])
    requests = partition_runs(run, collection)
    assert sorted(d for r in requests for d in r.changed_doc_ids) == sorted(changed)
    assert [d for r in requests for d in r.deleted_doc_ids] == ["gone.md"]
    for request in requests:
        assert request.run_key == f"kb:abc:{request.partition}"
        assert not request.full
        for doc_id in request.changed_doc_ids + request.deleted_doc_ids:
            assert collection.partition_of(doc_id) == request.partition
    assert partition_runs(run, collection) == requests  # stable


def test_a_full_run_covers_every_partition_and_a_plain_collection_keeps_its_key():
    full = PlannedRun("kb:full:1", [], [])
    assert [r.partition for r in partition_runs(full, config(3).collections[0])] == [
        "kb-s00",
        "kb-s01",
        "kb-s02",
    ]
    (only,) = partition_runs(PlannedRun("kb:x", ["a.md"], []), config(1).collections[0])
    assert (only.partition, only.run_key, only.changed_doc_ids) == ("kb", "kb:x", ["a.md"])


def test_the_stage_table_names_each_stage_once_in_order():
    assert [s.name for s in STAGES] == ["collect", "prepare", "plan", "execute", "land"]
    assert [s.asset for s in STAGES] == [
        "source_documents",
        "document_chunks",
        "batch_plan",
        "chunk_embeddings",
        "vector_index",
    ]


def test_batched_cuts_in_order_and_refuses_a_zero_size():
    assert list(batched(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batched([], 3)) == []
    with pytest.raises(ValueError):
        list(batched([1], 0))


def test_the_fake_embedder_is_deterministic_normalised_and_counts_its_work(model):
    from batch_pipeline.inference.embedder import Embedder
    from batch_pipeline.inference.fake import FakeEmbedder

    fake = FakeEmbedder(model)
    assert isinstance(fake, Embedder)
    texts = ["reset your password", "reset your password", "refund policy", ""]
    vectors = fake.embed(texts)
    assert vectors.shape == (4, model.embedding_dimension)
    assert (vectors[0] == vectors[1]).all()
    assert abs(float((vectors[2] ** 2).sum()) - 1.0) < 1e-6
    assert float(vectors[0] @ vectors[2]) < 0.99
    assert fake.texts_embedded == 4


def test_no_two_of_the_engine_s_classes_share_a_name():
    """A class name is one idea: a generation's scorer (`GenerationScorer`) is not a
    reranker's engine (`inference.scorer.Scorer`), nor a dtype's measurement a benchmark's."""
    engine = Path(__file__).resolve().parents[2] / "batch_pipeline"
    homes: dict[str, list[str]] = defaultdict(list)
    for path in engine.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                homes[node.name].append(str(path.relative_to(engine)))
    assert len(homes) > 200
    shared = {name: places for name, places in homes.items() if len(places) > 1}
    assert not shared, shared
