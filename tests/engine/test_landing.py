"""Land in bounded memory: vectors are joined onto chunks on disk, bucket by bucket, and
documents commit in groups; the table must come out exactly as if everything fitted at once."""

import numpy as np
import pyarrow as pa

from batch_pipeline.index import join, land
from batch_pipeline.runs.request import RunRequest
from batch_pipeline.state.staging import read_table


def _table(pipeline) -> dict[str, dict]:
    rows = pipeline.store.scan(
        pipeline.index, ["chunk_id", "doc_id", "input_hash", "vector", "run_id"]
    ).to_pylist()
    return {r["chunk_id"]: r for r in rows}


def _more_documents(docs, count: int) -> None:
    for n in range(count):
        (docs / f"extra-{n:02d}.md").write_text(
            f"# Extra {n}\n\nShared opening line.\n\n## Part\n\nBody text number {n}.\n"
        )


def test_small_join_buckets_and_commit_groups_land_the_same_table(
    make_pipeline, fake_embedder, workspace, tmp_path, monkeypatch
):
    _more_documents(workspace["docs"], 12)
    reference = make_pipeline()
    reference.run("run-1", fake_embedder)
    expected = _table(reference)

    # the same corpus into a second home, with buckets of 3 vectors and commits of 2 documents
    monkeypatch.setattr(join, "JOIN_BUCKET_ROWS", 3)
    monkeypatch.setattr(land, "DOCS_PER_COMMIT", 2)
    pipeline = make_pipeline(home=tmp_path / "home-small")
    out = pipeline.run("run-1", fake_embedder)
    got = _table(pipeline)

    assert got.keys() == expected.keys()
    assert out["land"].summary.documents_landed == len({r["doc_id"] for r in expected.values()})
    for chunk_id, row in expected.items():
        assert got[chunk_id]["input_hash"] == row["input_hash"]
        np.testing.assert_array_equal(got[chunk_id]["vector"], row["vector"])
    versions = len(pipeline.store.open(pipeline.index).list_versions())
    assert versions > 5  # it really committed in many small groups


def test_every_stale_chunk_meets_the_vector_of_its_own_input(
    make_pipeline, fake_embedder, workspace, tmp_path, monkeypatch
):
    _more_documents(workspace["docs"], 6)
    monkeypatch.setattr(join, "JOIN_BUCKET_ROWS", 2)
    pipeline = make_pipeline()
    run_id = "run-1"
    collected = pipeline.collect(run_id)
    chunks = pipeline.prepare(run_id, collected.path)
    plan = pipeline.plan(run_id, chunks.path)
    embeddings = pipeline.execute(run_id, plan.path, lambda: fake_embedder)
    # drop one input's vector, as if its batch had failed
    table = read_table(embeddings.path)
    missing = table["input_hash"][0].as_py()
    kept = table.filter(pa.compute.not_equal(table["input_hash"], missing))
    partial = pipeline.staging.root / "handbook" / run_id / "partial.parquet"
    partial.write_table(kept)
    vector_of = {
        h: np.asarray(v, np.float32)
        for h, v in zip(kept["input_hash"].to_pylist(), kept["vector"].to_pylist(), strict=True)
    }

    dim = pipeline.model.embedding_dimension
    joined = list(join.vectors_in_chunk_order(chunks.path, partial, dim, str(tmp_path)))
    source = read_table(chunks.path).to_pylist()
    assert [r["chunk_id"] for r in joined] == [r["chunk_id"] for r in source]  # order kept
    for row in joined:
        if not row["stale"]:
            assert row["vector"] is None
        elif row["input_hash"] == missing:
            assert row["vector"] is None  # land records the document as failed
        else:
            np.testing.assert_array_equal(row["vector"], vector_of[row["input_hash"]])
            assert row["embedded_at"] is not None


def test_table_stats_stream_and_the_drift_sample_reads_by_offset(make_pipeline, fake_embedder):
    """Stats read in tiny record batches equal stats read at once; a sample is distinct rows."""
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    store, index = pipeline.store, pipeline.index
    rows = store.scan(index, ["doc_id", "chunk_id", "run_id"]).to_pylist()

    small, large = store.stats(index, batch_rows=2), store.stats(index, batch_rows=65536)
    assert small == large
    assert small.rows == len(rows) > 2
    assert small.documents == len({r["doc_id"] for r in rows}) == 3
    assert small.run_ids == 1 and small.models == ["all-MiniLM-L6-v2"]

    sample = store.sample(index, ["chunk_id"], size=4, seed=1)["chunk_id"].to_pylist()
    assert len(sample) == len(set(sample)) == 4
    assert set(sample) <= {r["chunk_id"] for r in rows}
    everything = store.sample(index, ["chunk_id"], size=10_000, seed=1)["chunk_id"].to_pylist()
    assert sorted(everything) == sorted(r["chunk_id"] for r in rows)


def test_a_run_overtaken_by_newer_content_counts_those_chunks_as_superseded(
    make_pipeline, fake_embedder, workspace
):
    import os

    pipeline = make_pipeline()
    pipeline.run("run-0", fake_embedder)
    path = workspace["docs"] / "refunds.md"
    path.write_text("# Refund policy\n\nVersion one of the refund rules.\n")
    os.utime(path, (1_900_000_000, 1_900_000_000))
    slow = pipeline.collect("run-a")  # run A sees version one ...
    path.write_text("# Refund policy\n\nVersion two, newer, of the refund rules.\n")
    os.utime(path, (1_900_000_100, 1_900_000_100))
    fast = make_pipeline().run("run-b", fake_embedder)  # ... run B lands version two first
    assert fast["land"].summary.documents_landed == 1

    chunks = pipeline.prepare("run-a", slow.path)
    plan = pipeline.plan("run-a", chunks.path)
    embeddings = pipeline.execute("run-a", plan.path, lambda: fake_embedder)
    landed = pipeline.land_stage(
        RunRequest("run-a"), slow.path, chunks.path, embeddings.path
    ).summary
    assert landed.documents_superseded == 1 and landed.documents_landed == 0
    assert landed.chunks_superseded == chunks.summary.chunks > 0
    assert landed.chunks_written == landed.chunks_embedded == 0
    texts = pipeline.store.scan(pipeline.index, ["doc_id", "text"]).to_pylist()
    assert any("Version two" in r["text"] for r in texts if r["doc_id"] == "refunds.md")


def test_a_table_another_run_is_creating_reads_as_no_table_yet(tmp_path):
    """LanceDB lists a table as soon as its folder is there, before its first version is
    committed, and cannot open it until then. Four shards on S3 hit this: one shard's prepare
    asked for its documents' rows while another shard's land created the table, and failed
    with "Table ... was not found". Until the creator commits, the table holds no rows."""
    from batch_pipeline.state.vector_store import VectorStore, chunk_schema

    store = VectorStore(str(tmp_path / "lancedb"))
    index = "handbook__0123456789abcdef"
    (tmp_path / "lancedb" / f"{index}.lance" / "data").mkdir(parents=True)  # mid-creation
    assert store.has_table(index)
    assert store.open(index) is None
    assert store.chunk_keys(index, ["a.md"]) == {}
    assert store.count_rows(index) == 0
    store.create_table(index, chunk_schema(4))  # the creator commits its first version
    assert store.open(index) is not None and store.count_rows(index) == 0
