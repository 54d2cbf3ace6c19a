"""`--collection C` returns exactly C's share of what the unfiltered command returns, for a
plain collection and a sharded one; an unknown collection is an error (exit 2)."""

import json

import pytest

from batch_pipeline import cli
from batch_pipeline.config import load_config
from batch_pipeline.index.product import open_partition
from batch_pipeline.state.storage import resolve_storage
from tests.support import write_corpus

CONFIG = """\
collections:
  - name: reltest
    source: {kind: filesystem, path: plain, glob: "**/*"}
  - name: sharded
    shards: 2
    source: {kind: filesystem, path: sharded, glob: "**/*"}
"""


@pytest.fixture()
def two_collections(tmp_path, fake_embedder):
    """Both collections landed (every shard), each with failing documents."""
    for folder in ("plain", "sharded"):
        docs = write_corpus(tmp_path / folder)
        for n in range(3):
            (docs / f"empty-{n}.md").write_bytes(b"")  # recorded as failed, run goes on
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(CONFIG)
    config = load_config(config_path)
    storage = resolve_storage(str(tmp_path / "home"))
    for partition in config.partition_keys():
        open_partition(config, storage, partition).run(f"run-{partition}", fake_embedder)
    return ["--config", str(config_path), "--home", str(tmp_path / "home")]


def run_cli(capsys, *args: str) -> tuple[int, object]:
    code = cli.main(list(args))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in args and code in (0, 1) else out


@pytest.mark.parametrize("collection", ["reltest", "sharded"])
def test_failures_of_one_collection_are_its_share_of_all(two_collections, capsys, collection):
    _, everything = run_cli(capsys, *two_collections, "failures", "--json")
    code, filtered = run_cli(
        capsys, *two_collections, "failures", "--collection", collection, "--json"
    )
    assert code == 0
    assert {r["collection"] for r in everything} == {"reltest", "sharded"}
    assert filtered == [r for r in everything if r["collection"] == collection]
    assert [r["doc_id"] for r in filtered] == ["empty-0.md", "empty-1.md", "empty-2.md"]
    assert all(r["generation"].startswith(f"{collection}__") for r in filtered)


@pytest.mark.parametrize("command", ["status", "doctor"])
@pytest.mark.parametrize("collection", ["reltest", "sharded"])
def test_status_and_doctor_of_one_collection_match_the_unfiltered_report(
    two_collections, capsys, command, collection
):
    _, everything = run_cli(capsys, *two_collections, command, "--json")
    _, filtered = run_cli(capsys, *two_collections, command, "--collection", collection, "--json")
    by_name = {entry["collection"]: entry for entry in everything}
    assert set(by_name) == {"reltest", "sharded"}
    for report in (by_name[collection], filtered[0]):
        report.pop("lag_seconds", None)  # measured against the clock
    assert filtered == [by_name[collection]]
    assert filtered[0]["failing_documents"] == 3


def test_plain_failures_output_names_collection_and_generation(two_collections, capsys):
    code, text = run_cli(capsys, *two_collections, "failures", "--collection", "reltest")
    assert code == 0
    lines = text.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("reltest  reltest__") for line in lines)


@pytest.mark.parametrize("command", ["failures", "status", "doctor", "search"])
def test_an_unknown_collection_exits_2_naming_the_configured_ones(two_collections, capsys, command):
    extra = ["a query"] if command == "search" else []
    code = cli.main([*two_collections, command, *extra, "--collection", "nosuch"])
    err = capsys.readouterr().err
    assert code == 2
    unknown = "unknown collection" if command == "search" else "unknown product"
    assert f"{unknown} 'nosuch'" in err and "reltest, sharded" in err
