"""End to end: a real Dagster daemon runs the publish sensor, which launches real runs."""

import subprocess
import time
from pathlib import Path

import lancedb

from tests.support import dagster_daemon, index_of, pipeline_env, write_corpus

DEADLINE_SECONDS = 240


def table_rows(home: Path, index: str) -> dict[str, set]:
    db = lancedb.connect(str(home / "lancedb"))
    if index not in db.list_tables().tables:
        return {}
    rows = (
        db.open_table(index)
        .search()
        .select(["doc_id", "chunk_id", "run_id", "embedded_at", "text"])
        .limit(None)
        .to_list()
    )
    out: dict[str, set] = {}
    for row in rows:
        out.setdefault(row["doc_id"], set()).add(
            (row["chunk_id"], row["run_id"], row["embedded_at"], row["text"])
        )
    return out


def wait_for(predicate, what: str, daemon: subprocess.Popen, log: Path):
    deadline = time.time() + DEADLINE_SECONDS
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        assert daemon.poll() is None, f"daemon exited:\n{log.read_text()[-4000:]}"
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


def test_daemon_sensor_reembeds_edits_additions_and_deletions(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    (docs / "faq.md").write_text("# FAQ\n\n## Hours\n\nSupport answers around the clock.\n")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n"
        "  - name: handbook\n"
        '    source: {kind: filesystem, path: docs, glob: "**/*"}\n'
        "sensor: {interval_seconds: 1, window_seconds: 2}\n"
        "schedule: {enabled: false}\n"
    )
    home = tmp_path / "home"
    index = index_of(config)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    env = pipeline_env(config, home, DAGSTER_HOME=str(dagster_home), HF_HUB_OFFLINE="1")
    log = tmp_path / "daemon.log"
    with dagster_daemon(env, log) as daemon:
        first = wait_for(
            lambda: (rows := table_rows(home, index)) and len(rows) == 4 and rows,
            "the first full run to land every document",
            daemon,
            log,
        )
        path = docs / "account" / "reset-password.md"
        path.write_text(path.read_text().replace("check your spam folder", "check the junk folder"))
        (docs / "shipping.md").write_text("# Shipping\n\nOrders ship within five working days.\n")
        (docs / "refunds.md").unlink()

        def reflected():
            rows = table_rows(home, index)
            edited = any("junk folder" in r[3] for r in rows.get("account/reset-password.md", ()))
            if edited and "shipping.md" in rows and "refunds.md" not in rows:
                return rows
            return None

        after = wait_for(reflected, "the edit, addition and deletion to land", daemon, log)
        # untouched documents keep their rows exactly: same run id and embedding time
        assert after["notes.txt"] == first["notes.txt"]
        assert after["faq.md"] == first["faq.md"]
        edited_runs = {r[1] for r in after["account/reset-password.md"]}
        first_run = {r[1] for r in first["notes.txt"]}
        assert edited_runs - first_run  # the edited section was re-embedded by a new run
        # sections of the edited document that did not change were not re-embedded
        assert {r[:3] for r in after["account/reset-password.md"]} & {
            r[:3] for r in first["account/reset-password.md"]
        }
