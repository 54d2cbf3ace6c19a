"""After a manual LanceDB restore or a lost tracking database, the next run converges."""

import json
import subprocess

from batch_pipeline.state import reconcile
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.tracking.schema import documents
from tests.support import cli_command, pipeline_env


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


def test_reconciling_bucket_by_bucket_finds_every_kind_of_drift(
    make_pipeline, runner, workspace, monkeypatch
):
    """Tiny buckets (a few rows each) must report exactly what one bucket would."""
    for n in range(8):
        (workspace["docs"] / f"extra-{n}.md").write_text(f"# Extra {n}\n\nBody number {n}.\n")
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    table = pipeline.store.open(pipeline.index)
    table.delete("doc_id = 'notes.txt'")  # only in tracking now
    table.update(where="doc_id = 'refunds.md'", values={"input_hash": "tampered"})  # mismatch
    with pipeline.tracking.engine.begin() as conn:  # only in the index now
        conn.execute(
            documents.delete().where(
                documents.c.generation == pipeline.index, documents.c.doc_id == "extra-3.md"
            )
        )
    whole = reconcile_index(pipeline.store, pipeline.tracking, pipeline.index)
    monkeypatch.setattr(reconcile, "BUCKET_ROWS", 2)
    bucketed = reconcile_index(pipeline.store, pipeline.tracking, pipeline.index)

    assert whole.only_in_tracking == ["notes.txt"]
    assert whole.chunk_mismatch == ["refunds.md"]
    assert whole.only_in_index == ["extra-3.md"]
    assert bucketed == whole
    assert bucketed.documents_indexed == whole.documents_indexed == 10
