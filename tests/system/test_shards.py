"""Sharded collections: one partition per shard, concurrent shard runs into one table."""

import subprocess

import dagster as dg

from batch_pipeline.config import load_config
from batch_pipeline.generations.registry import GenerationRegistry
from batch_pipeline.names import shard_of
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import cli_command, index_of, many_articles, pipeline_env, tick

SHARDED = (
    "collections:\n  - name: handbook\n    shards: 4\n"
    "    source: {kind: filesystem, path: docs}\n"
    "sensor: {window_seconds: 0}\n"
)


def test_shards_partition_the_collection(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "pipeline.yaml").write_text(SHARDED)
    config = load_config(tmp_path / "pipeline.yaml")
    keys = config.partition_keys()
    assert keys == ["handbook-s00", "handbook-s01", "handbook-s02", "handbook-s03"]
    assert config.locate("handbook-s02")[1] == 2 and config.locate("handbook")[1] is None
    ids = [f"article-{i:02d}.md" for i in range(200)]
    owners = [shard_of(d, 4) for d in ids]
    assert set(owners) == {0, 1, 2, 3}
    assert owners == [shard_of(d, 4) for d in ids]  # stable


def test_concurrent_shard_runs_land_into_one_consistent_table(tmp_path):
    many_articles(tmp_path / "docs")
    config = tmp_path / "pipeline.yaml"
    config.write_text(SHARDED)
    home = tmp_path / "home"
    runs = [
        subprocess.Popen(
            cli_command("run", "--partition", f"handbook-s{n:02d}"),
            env=pipeline_env(config, home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
    storage = resolve_storage(str(home))
    store, tracking = VectorStore(storage.lancedb_uri), TrackingStore(storage.tracking_url)
    index = index_of(config)
    rows = store.scan(index, ["chunk_id", "doc_id", "partition"]).to_pylist()
    assert len(rows) == len({r["chunk_id"] for r in rows})
    assert {r["doc_id"] for r in rows} == {f"article-{i:02d}.md" for i in range(24)}
    for row in rows:  # every row landed from the shard that owns it
        assert row["partition"] == f"handbook-s{shard_of(row['doc_id'], 4):02d}"
    assert reconcile_index(store, tracking, index).ok
    generation = GenerationRegistry(tracking).live("handbook")
    assert generation.index_name == index and generation.complete


def test_the_sensor_targets_only_the_changed_shard(workspace):
    from batch_pipeline.definitions import build_definitions

    many_articles(workspace["root"] / "sharded")
    workspace["config"].write_text(SHARDED.replace("path: docs", "path: sharded"))
    defs = build_definitions(workspace["config"])
    with dg.instance_for_test() as instance:
        first = tick(defs, workspace, instance)
        assert (
            sorted(r.partition_key for r in first.run_requests)
            == load_config(workspace["config"]).partition_keys()
        )
        path = workspace["root"] / "sharded" / "article-05.md"
        path.write_text(path.read_text() + "\nOne more line.\n")
        (request,) = tick(defs, workspace, instance, first.cursor).run_requests
        assert request.partition_key == f"handbook-s{shard_of('article-05.md', 4):02d}"
        config = request.run_config["ops"]["source_documents"]["config"]
        assert config["changed_doc_ids"] == ["article-05.md"]
