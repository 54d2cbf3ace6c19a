"""The batch-pipeline CLI as a user runs it: a real subprocess on a real index."""

import json
import subprocess

import pytest

from tests.support import cli_command, pipeline_env


def cli(workspace, *args):
    return subprocess.run(
        cli_command(*args),
        env=pipeline_env(workspace["config"], workspace["home"]),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture()
def indexed(workspace, make_pipeline, runner):
    make_pipeline().run("run-1", runner)
    return workspace


def test_search_prints_ranked_chunks(indexed):
    result = cli(
        indexed, "search", "how do I reset my password", "--collection", "handbook", "-k", "2"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1. ")
    assert "account/reset-password.md" in lines[0]
    assert "#" in lines[0]  # the chunk id


def test_search_json(indexed):
    result = cli(
        indexed,
        "search",
        "refund for an annual plan",
        "--collection",
        "handbook",
        "-k",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)
    assert len(hits) == 3
    assert hits[0]["doc_id"] == "refunds.md"
    assert {"doc_id", "chunk_id", "score", "text"} <= set(hits[0])
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]


def test_status_counts_stale_documents(indexed):
    (indexed["docs"] / "refunds.md").write_text("# Refund policy\n\nNo refunds at all.\n")
    (indexed["docs"] / "new.md").write_text("# New\n\nA new page.\n")
    result = cli(indexed, "status", "--json")
    assert result.returncode == 0, result.stderr
    (status,) = json.loads(result.stdout)
    assert status["collection"] == "handbook"
    assert status["documents"] == 3
    assert status["rows"] > 3
    assert status["last_run_id"] == "run-1"
    assert status["last_landed_at"]
    assert status["model"] == "all-MiniLM-L6-v2"
    assert status["stale_documents"] == 2
    assert status["pending_documents"] == 2 and status["lag_seconds"] >= 0
    assert status["oldest_source_change_pending"]
    assert status["last_run_chunks_embedded"] > 0
    table = cli(indexed, "status")
    assert table.returncode == 0
    header = table.stdout.splitlines()[0]
    assert header.split()[:4] == ["COLLECTION", "ROWS", "DOCS", "STALE"]
    assert "LAG S" in header and "EMBEDDED" in header and "GENERATION" in header
    assert " live " in table.stdout.splitlines()[1] + " "
    assert "run-1" in table.stdout


def test_unknown_collection_and_empty_index_are_clear_errors(workspace):
    result = cli(workspace, "search", "x", "--collection", "nope")
    assert result.returncode == 2
    assert "unknown collection 'nope'; configured: handbook" in result.stderr
    result = cli(workspace, "search", "x", "--collection", "handbook")
    assert result.returncode == 2
    assert "has no live generation yet" in result.stderr
