"""What a user sees when something is wrong: one line and exit status 2 when the tracking store
or the source cannot be reached, and figures that tell the truth after damage."""

import errno
import json
import shutil

import pytest
import sqlalchemy as sa

from batch_pipeline import cli
from batch_pipeline.config import load_config
from batch_pipeline.index.product import open_partition
from batch_pipeline.state.storage import resolve_storage

COMMANDS = [
    ["status"],
    ["doctor"],
    ["failures"],
    ["search", "reset my password", "--collection", "handbook"],
    ["run", "--collection", "handbook"],
]


@pytest.mark.parametrize(
    "url",
    [
        "notaurl",
        "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/nowhere",
        "postgresql+psycopg://postgres@127.0.0.1:1/nowhere?password=hunter2",
        "postgresql+psycopg://postgres@127.0.0.1:1/nowhere?sslmode=disable&sslpassword=hunter2",
    ],
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
    open_partition(config, storage, "handbook").run("run-1", fake_embedder)
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


@pytest.mark.parametrize("k", ["0", "1001", "99999999999999999999"])
def test_search_bounds_k_in_one_line(workspace, capsys, k):
    base = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*base, "search", "reset", "--collection", "handbook", "-k", k]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"batch-pipeline: -k must be between 1 and 1000, not {k}"


@pytest.mark.parametrize(
    ("command", "flag", "value", "wanted"),
    [
        (["run", "--collection", "handbook"], "--token-budget", "0", " of at least 1"),
        (["run", "--collection", "handbook"], "--max-batch-size", "-4", " of at least 1"),
        (["run", "--collection", "handbook"], "--checkpoint-every", "0", " of at least 1"),
        (["report"], "--runs", "0", " of at least 1"),
        (["report"], "--runs", "99999999999999999999", " of at most 2,147,483,647"),
        (["run", "--collection", "handbook"], "--token-budget", "2147483648", " of at most"),
        (["intents", "--day", "2026-11-29"], "--examples", "-1", " of at least 0"),
        (["briefs", "--collection", "handbook"], "--limit", "2.5", ", 0 for all"),
    ],
)
def test_a_count_out_of_range_is_refused_before_anything_runs(
    tmp_path, capsys, command, flag, value, wanted
):
    home = tmp_path / "home"
    with pytest.raises(SystemExit) as exited:
        cli.main(["--home", str(home), *command, flag, value])
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    expected = f"error: argument {flag}: expected a whole number{wanted}"
    assert expected in last and last.endswith(f", not '{value}'")
    assert not home.exists()  # refused before the state folder was opened


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (
            lambda: sa.exc.OperationalError("INSERT INTO runs", {}, ConnectionError("closed")),
            "a database stopped answering (OperationalError: closed); what landed is kept",
        ),
        (
            lambda: OSError(errno.ENOSPC, "No space left on device", "/home/staging/x.parquet"),
            "no space left on the device (/home/staging/x.parquet); what landed is kept",
        ),
    ],
    ids=["database", "disk"],
)
def test_a_fault_midway_through_a_run_is_one_line_unless_debug(
    workspace, capsys, monkeypatch, fake_embedder, fault, said
):
    """A tracking store that stops answering, or a disk that fills, midway through a run:
    one line naming the fault and what to do, exit 2; `--debug` shows the traceback."""
    from batch_pipeline.runs.partition import StagedPartition

    def broken(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - FAULT, injected in plan
        raise fault()

    monkeypatch.setattr(StagedPartition, "plan", broken)
    base = ["--config", str(workspace["config"]), "--home", str(workspace["home"])]
    assert cli.main([*base, "run", "--collection", "handbook"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if not line.startswith("batch-pipeline: prepare:")]
    assert len(errors) == 1 and said in errors[0] and "--debug" in errors[0]  # no traceback
    with pytest.raises((sa.exc.OperationalError, OSError)):
        cli.main([*base, "--debug", "run", "--collection", "handbook"])
