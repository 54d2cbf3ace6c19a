"""What a user sees when something is wrong: one line and exit status 2 when the tracking store
or the source cannot be reached, and figures that tell the truth after damage."""

import json
import shutil

import pytest

from batch_pipeline import cli
from batch_pipeline.config import load_config
from batch_pipeline.pipeline import PartitionPipeline
from batch_pipeline.state.storage import resolve_storage

COMMANDS = [
    ["status"],
    ["doctor"],
    ["failures"],
    ["search", "reset my password", "--collection", "handbook"],
    ["run", "--collection", "handbook"],
]


@pytest.mark.parametrize(
    "url", ["notaurl", "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/nowhere"]
)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_unreachable_tracking_store_is_one_line_and_exit_2(
    workspace, capsys, monkeypatch, url, command
):
    monkeypatch.setenv("BATCH_PIPELINE_TRACKING_URL", url)
    base = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*base, *command]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("batch-pipeline: cannot open the tracking store")
    assert "BATCH_PIPELINE_TRACKING_URL" in err and "hunter2" not in err


@pytest.mark.parametrize("command", [["status"], ["doctor"], ["run", "--collection", "handbook"]])
def test_a_missing_source_folder_names_the_field_and_exits_2(workspace, capsys, command):
    shutil.rmtree(workspace["docs"])
    base = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*base, *command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"batch-pipeline: {workspace['config']}: invalid configuration",
        f"  collections[0].source.path: folder not found: {workspace['docs']} "
        "(relative paths resolve against the config file's folder)",
    ]


def test_doctor_reports_an_unreachable_s3_source(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: kb\n    source: {kind: s3, bucket: docs, "
        "endpoint_url: 'http://127.0.0.1:1', region: us-east-1}\n"
    )
    code = cli.main(["--config", str(config), "--home", str(tmp_path / "home"), "doctor"])
    out, err = capsys.readouterr()
    assert code == 2  # it said "healthy" before
    assert "source unavailable" in out and "source unavailable: cannot reach s3://docs/" in err


def _built(workspace, fake_embedder) -> list[str]:
    config = load_config(workspace["config"])
    storage = resolve_storage(str(workspace["home"]))
    PartitionPipeline(config, storage, "handbook").run("run-1", fake_embedder)
    return ["--config", str(workspace["config"]), "--home", str(workspace["home"])]


def _report(capsys, base, command) -> dict:
    cli.main([*base, command, "--json"])
    (report,) = json.loads(capsys.readouterr().out)
    return report


def test_after_the_lancedb_folder_is_lost_the_figures_say_so(workspace, fake_embedder, capsys):
    base = _built(workspace, fake_embedder)
    shutil.rmtree(workspace["home"] / "lancedb")
    health = _report(capsys, base, "doctor")
    assert (health["completeness"], health["documents_complete"]) == (0.0, 0)  # was 100% (3/3)
    assert not health["healthy"]
    status = _report(capsys, base, "status")
    assert status["rows"] == 0
    assert status["stale_documents"] == 3 and status["index_mismatch"] == 3  # were 0


def test_after_the_tracking_database_is_lost_the_figures_say_so(workspace, fake_embedder, capsys):
    base = _built(workspace, fake_embedder)
    for path in workspace["home"].glob("tracking.db*"):
        path.unlink()
    health = _report(capsys, base, "doctor")
    assert (health["documents_intended"], health["completeness"]) == (3, 0.0)  # was 0/0, 100%
    status = _report(capsys, base, "status")
    assert status["rows"] > 0 and status["index_mismatch"] == 3
