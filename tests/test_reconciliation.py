"""After a manual LanceDB restore or a lost tracking database, the next run converges."""

import json
import subprocess

from batch_pipeline.reconcile import reconcile_index
from tests.conftest import cli_command, pipeline_env


def state(pipeline):
    rows = pipeline.store.scan(pipeline.index, ["chunk_id", "doc_id", "input_hash"]).to_pylist()
    assert len(rows) == len({r["chunk_id"] for r in rows})
    return {r["chunk_id"]: (r["doc_id"], r["input_hash"]) for r in rows}


def doctor(workspace):
    result = subprocess.run(
        cli_command("doctor", "--json"),
        env=pipeline_env(workspace["config"], workspace["home"]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.returncode, json.loads(result.stdout)[0]


def test_a_manual_restore_is_detected_and_repaired(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    old_version = pipeline.store.open(pipeline.index).version
    path = workspace["docs"] / "refunds.md"
    path.write_text(path.read_text() + "\n## Exceptions\n\nStatutory rights are unaffected.\n")
    pipeline.run("run-2", runner)
    expected = state(pipeline)
    pipeline.store.open(pipeline.index).restore(old_version)  # an operator rolls the table back
    report = reconcile_index(pipeline.store, pipeline.tracking, pipeline.index)
    assert report.chunk_mismatch == ["refunds.md"]
    code, health = doctor(workspace)
    assert code == 1 and not health["reconciled"] and health["chunk_mismatch"] == ["refunds.md"]

    out = pipeline.run("run-3", runner)  # nothing changed at the source, yet it repairs
    assert out["collect"].counts["new"] == 1
    assert state(pipeline) == expected
    assert reconcile_index(pipeline.store, pipeline.tracking, pipeline.index).ok
    code, health = doctor(workspace)
    assert code == 0 and health["healthy"]


def test_a_lost_tracking_database_converges_without_reembedding(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    before = state(pipeline)
    pipeline.tracking.dispose()
    (workspace["home"] / "tracking.db").unlink()
    (workspace["docs"] / "notes.txt").unlink()  # deleted while nothing tracked it
    pipeline = make_pipeline()
    out = pipeline.run("run-2", runner)
    assert out["execute"].stats.inputs == 0  # every vector was still in the index
    assert out["collect"].counts["deleted"] == 1
    after = state(pipeline)
    assert after == {k: v for k, v in before.items() if v[0] != "notes.txt"}
    assert reconcile_index(pipeline.store, pipeline.tracking, pipeline.index).ok
