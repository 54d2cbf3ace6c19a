"""The five stages end to end on the real model, LanceDB and SQLite, without Dagster."""

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from batch_pipeline.config import ConfigError
from batch_pipeline.index import partition as pipeline_module
from batch_pipeline.inference.devices import ModelLoadError
from batch_pipeline.runs.request import RunRequest
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.stages import collect

LINEAGE = [
    "collection",
    "partition",
    "doc_id",
    "chunk_id",
    "chunk_index",
    "text",
    "vector",
    "input_hash",
    "model_name",
    "model_fingerprint",
    "run_id",
    "embedded_at",
    "source_version",
]


def rows(pipeline):
    table = pipeline.store.open(pipeline.index)
    return {r["chunk_id"]: r for r in table.to_arrow().to_pylist()} if table else {}


def test_full_run_lands_every_chunk_with_lineage(make_pipeline, runner):
    pipeline = make_pipeline()
    out = pipeline.run("run-1", runner)
    landed = rows(pipeline)
    assert out["land"].summary.documents_landed == 3
    assert len(landed) == out["prepare"].chunks == out["land"].summary.chunks_written
    assert {r["doc_id"] for r in landed.values()} == {
        "account/reset-password.md",
        "refunds.md",
        "notes.txt",
    }
    for row in landed.values():
        for column in LINEAGE:
            assert row[column] not in (None, ""), column
        assert row["run_id"] == "run-1"
        assert row["model_fingerprint"] == pipeline.fingerprint
        assert row["model_name"] == "all-MiniLM-L6-v2"
        assert abs(np.linalg.norm(row["vector"]) - 1.0) < 1e-4  # the model normalises
    assert pipeline.tracking.document_count(pipeline.index) == 3


def test_execute_pads_the_token_ids_prepare_counted_instead_of_tokenising(make_pipeline, runner):
    from batch_pipeline.state.staging import read_table

    pipeline = make_pipeline()
    collected = pipeline.collect("run-1")
    chunks = pipeline.prepare("run-1", collected.path)
    tokenizer = runner.model.tokenizer
    prepared = read_table(chunks.path, ["input_text", "input_ids", "token_count"]).to_pylist()
    for row in prepared:  # the ids the model's tokenizer gives the exact model input
        assert row["input_ids"] == tokenizer(row["input_text"])["input_ids"]
        assert row["token_count"] == len(row["input_ids"])
    plan = pipeline.plan("run-1", chunks.path)
    planned = read_table(plan.path, ["input_text", "input_ids"]).to_pylist()
    assert len(planned) == len(prepared)
    assert all(r["input_ids"] == tokenizer(r["input_text"])["input_ids"] for r in planned)
    executed = pipeline.execute("run-1", plan.path, lambda: runner)
    assert executed.summary.metadata()["inputs_tokenized"] == 0
    assert executed.summary.stats.inputs == len(planned)
    vectors = read_table(executed.path, ["vector"])["vector"].to_numpy(zero_copy_only=False)
    reference = runner.model.encode([r["input_text"] for r in planned], convert_to_numpy=True)
    np.testing.assert_allclose(np.stack(vectors), reference, atol=1e-5)


def test_second_run_embeds_nothing(make_pipeline, runner):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    before = rows(pipeline)
    out = pipeline.run("run-2", runner)
    assert out["collect"].counts["unchanged"] == 3
    assert out["plan"].inputs == 0
    assert out["execute"].stats.inputs == 0
    assert out["land"].summary.chunks_written == 0
    assert rows(pipeline) == before


def test_editing_one_section_reembeds_only_that_section(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    before = rows(pipeline)
    path = workspace["docs"] / "account" / "reset-password.md"
    path.write_text(path.read_text().replace("check your spam folder", "check the junk folder"))
    out = pipeline.run("run-2", runner)
    after = rows(pipeline)
    assert out["collect"].counts["changed"] == 1
    assert out["execute"].stats.inputs == 1
    changed = {c for c in after if after[c]["run_id"] == "run-2"}
    assert len(changed) == 1
    (chunk_id,) = changed
    assert after[chunk_id]["section"] == "Troubleshooting"
    assert "junk folder" in after[chunk_id]["text"]
    assert set(after) == set(before)  # same chunk ids: other sections kept their ids
    for cid in set(after) - changed:
        assert after[cid]["input_hash"] == before[cid]["input_hash"]
        assert after[cid]["embedded_at"] == before[cid]["embedded_at"]


def test_title_edit_reembeds_that_documents_chunks(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    path = workspace["docs"] / "account" / "reset-password.md"
    path.write_text(path.read_text().replace("# Resetting your password", "# Password resets"))
    out = pipeline.run("run-2", runner)
    after = rows(pipeline)
    doc_chunks = [r for r in after.values() if r["doc_id"] == "account/reset-password.md"]
    others = [r for r in after.values() if r["doc_id"] != "account/reset-password.md"]
    assert doc_chunks and all(r["run_id"] == "run-2" for r in doc_chunks)
    assert all(r["title"] == "Password resets" for r in doc_chunks)
    assert all(r["run_id"] == "run-1" for r in others)
    assert out["execute"].stats.inputs == len(doc_chunks)


def test_deleting_a_file_removes_its_rows(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    (workspace["docs"] / "refunds.md").unlink()
    out = pipeline.run("run-2", runner)
    assert out["collect"].counts["deleted"] == 1
    assert out["land"].summary.documents_deleted == 1
    assert out["land"].summary.chunks_removed >= 1
    assert all(r["doc_id"] != "refunds.md" for r in rows(pipeline).values())
    assert "refunds.md" not in pipeline.tracking.landed_documents(pipeline.index)


def test_replaying_a_run_changes_nothing(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    path = workspace["docs"] / "refunds.md"
    path.write_text(path.read_text() + "\n## Exceptions\n\nStatutory rights are not affected.\n")
    run_id = "run-2"
    collected = pipeline.collect(run_id)
    chunks = pipeline.prepare(run_id, collected.path)
    plan = pipeline.plan(run_id, chunks.path)
    embeddings = pipeline.execute(run_id, plan.path, lambda: runner)
    request = RunRequest(run_id)
    pipeline.land_stage(request, collected.path, chunks.path, embeddings.path)
    first = rows(pipeline)
    replay = pipeline.land_stage(request, collected.path, chunks.path, embeddings.path).summary
    second = rows(pipeline)
    assert replay.chunks_removed == 0
    assert second.keys() == first.keys()
    for chunk_id, row in first.items():
        other = second[chunk_id]
        assert {k: v for k, v in row.items() if k != "vector"} == {
            k: v for k, v in other.items() if k != "vector"
        }
        np.testing.assert_array_equal(row["vector"], other["vector"])


def test_touching_a_file_without_changing_it_embeds_nothing(make_pipeline, runner, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    path = workspace["docs"] / "notes.txt"
    path.write_text(path.read_text())  # new mtime, same bytes
    out = pipeline.run("run-2", runner)
    assert out["collect"].counts["unchanged"] == 3
    assert out["plan"].inputs == 0


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.md", b"", "empty"),
        ("binary.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
        ("latin1.md", "caf\xe9 cr\xe8me".encode("latin-1"), "invalid_utf8"),
        ("blank.md", b"   \n\t\n  \n", "whitespace_only"),
    ],
)
def test_bad_input_is_recorded_and_the_run_goes_on(
    make_pipeline, runner, workspace, name, content, reason
):
    (workspace["docs"] / name).write_bytes(content)
    pipeline = make_pipeline()
    out = pipeline.run("run-1", runner)
    assert out["collect"].counts["failed"] == 1
    assert out["land"].summary.documents_landed == 3  # everything else landed
    failures = pipeline.tracking.list_failures(pipeline.index)
    assert [(f["doc_id"], f["reason"], f["stage"]) for f in failures] == [(name, reason, "collect")]
    assert failures[0]["message"]
    assert name not in {r["doc_id"] for r in rows(pipeline).values()}


def test_a_five_megabyte_file_is_chunked_normally(make_pipeline, workspace):
    paragraph = (
        "Large exports are split into parts. Each part is verified before the next one starts, "
        "and a failed part is retried on its own. "
    ) * 8
    body = "# Export log\n\n" + "\n\n".join(
        f"## Part {i}\n\n{paragraph}" for i in range(5 * 1024 * 1024 // (len(paragraph) + 16))
    )
    (workspace["docs"] / "huge.md").write_text(body)
    assert (workspace["docs"] / "huge.md").stat().st_size >= 5 * 1024 * 1024 - 4096
    pipeline = make_pipeline()
    collected = pipeline.collect("run-1")
    assert collected.summary.counts["new"] == 4
    chunks = pipeline.prepare("run-1", collected.path)
    assert not chunks.summary.failures
    table = pq.read_table(chunks.path)
    huge = table.filter(pc.equal(table["doc_id"], "huge.md"))
    assert huge.num_rows > 5000
    assert pc.max(huge["token_count"]).as_py() <= pipeline.model.max_seq_length
    assert len(set(huge["chunk_id"].to_pylist())) == huge.num_rows


def test_missing_source_path_fails_with_what_to_fix(make_pipeline, workspace, tmp_path):
    from tests.support import write_config

    config = write_config(tmp_path / "missing.yaml", source="no-such-folder")
    with pytest.raises(ConfigError, match=r"collections\[0\]\.source\.path: folder not found"):
        make_pipeline(config)  # at load
    (tmp_path / "no-such-folder").mkdir()
    pipeline = make_pipeline(config)
    (tmp_path / "no-such-folder").rmdir()  # unmounted between load and run
    with pytest.raises(SourceUnavailableError, match="no-such-folder.*source.path"):
        pipeline.collect("run-1")


def test_a_model_that_cannot_be_loaded_fails_with_a_clear_message(model, tmp_path):
    from dataclasses import replace

    from batch_pipeline.inference.runner import EmbeddingRunner

    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot load model .*model.path"):
        EmbeddingRunner(replace(model, path=broken, name="broken"), device="cpu")


def test_collect_classifies_the_same_in_tiny_batches_and_buckets(
    make_pipeline, runner, workspace, monkeypatch
):
    """Collect looks landed documents up a batch at a time and finds deletions bucket by
    bucket on disk; with batches and buckets of two it must classify exactly as at once."""
    docs = workspace["docs"]
    for n in range(10):
        (docs / f"extra-{n}.md").write_text(f"# Extra {n}\n\nBody number {n}.\n")
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    for n in (1, 4, 7):
        (docs / f"extra-{n}.md").unlink()
    (docs / "extra-2.md").write_text("# Extra 2\n\nA new body.\n")
    (docs / "extra-new.md").write_text("# New\n\nJust added.\n")

    def classify() -> dict[str, str]:
        landed = collect.LandedDocuments(pipeline.tracking, pipeline.index)
        summary = collect.CollectSummary()
        rows = collect.classify_documents(pipeline.source, landed, pipeline.fingerprint, summary)
        return {row["doc_id"]: row["status"] for row in rows}

    at_once = classify()
    monkeypatch.setattr(collect, "LOOKUP_BATCH", 2)
    monkeypatch.setattr(collect, "DELETION_BUCKET_DOCS", 2)
    in_pieces = classify()

    assert in_pieces == at_once
    assert {d for d, s in at_once.items() if s == "deleted"} == {
        "extra-1.md",
        "extra-4.md",
        "extra-7.md",
    }
    assert at_once["extra-2.md"] == "changed" and at_once["extra-new.md"] == "new"
    assert sum(s == "unchanged" for s in at_once.values()) == 3 + 10 - 3 - 1


def test_a_refresh_with_nothing_changed_loads_no_tokenizer(make_pipeline, runner, monkeypatch):
    """Loading the tokenizer imports transformers and torch (seconds per run process)."""
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)

    def no_tokenizer(path):  # noqa: ANN001, ANN202
        raise AssertionError("a no-op refresh loaded the tokenizer")

    monkeypatch.setattr(pipeline_module, "load_tokenizer", no_tokenizer)
    collected = pipeline.collect("run-2")
    prepared = pipeline.prepare("run-2", collected.path)
    assert prepared.summary.chunks_stale == 0 and not prepared.summary.failures


def test_collect_records_changes_as_pending_a_batch_at_a_time(
    make_pipeline, workspace, monkeypatch
):
    for n in range(5):
        (workspace["docs"] / f"extra-{n}.md").write_text(f"# Extra {n}\n\nBody number {n}.\n")
    monkeypatch.setattr(collect, "LOOKUP_BATCH", 2)
    pipeline = make_pipeline()
    batches: list[int] = []
    record = pipeline.tracking.record_pending

    def counted(collection, changes):  # noqa: ANN001, ANN202
        batches.append(len(changes))
        record(collection, changes)

    monkeypatch.setattr(pipeline.tracking, "record_pending", counted)
    collected = pipeline.collect("run-1")

    assert collected.summary.counts["new"] == 8
    assert max(batches) <= 2 and sum(batches) == 8
    assert pipeline.tracking.freshness(pipeline.index)["pending"] == 8


def test_prepare_in_worker_processes_writes_the_same_chunks_in_the_same_order(
    make_pipeline, workspace
):
    from tests.support import many_articles, write_config

    many_articles(workspace["root"] / "many", count=40)
    (workspace["root"] / "many" / "empty.md").write_text("---\ntitle: x\n---\n")  # no text
    config = write_config(workspace["config"], source="many")
    text = config.read_text()
    outputs = {}
    for workers in (1, 3):
        config.write_text(text + f"prepare: {{workers: {workers}, min_documents_per_worker: 4}}\n")
        pipeline = make_pipeline(home=workspace["root"] / f"home-{workers}")
        collected = pipeline.collect("run-1")
        prepared = pipeline.prepare("run-1", collected.path)
        assert prepared.summary.workers == workers
        outputs[workers] = (pq.read_table(prepared.path), prepared.summary)
    single, parallel = outputs[1], outputs[3]
    assert single[0].num_rows > 100
    assert parallel[0].equals(single[0])  # same chunks, same order, same staleness
    assert (
        [(f.doc_id, f.reason) for f in parallel[1].failures]
        == [(f.doc_id, f.reason) for f in single[1].failures]
        == [("empty.md", "no_text")]
    )


def test_prepare_chunks_in_process_when_too_few_documents_would_pay_for_workers():
    from batch_pipeline.index.prepare import prepare_workers

    assert prepare_workers(4, documents=10_000, min_documents=256) == 4
    assert prepare_workers(4, documents=600, min_documents=256) == 2
    assert prepare_workers(4, documents=100, min_documents=256) == 1
    assert prepare_workers(1, documents=10_000, min_documents=256) == 1
