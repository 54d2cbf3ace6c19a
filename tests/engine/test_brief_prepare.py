"""Briefs' prepare in bounded memory: the documents' and the landed briefs' keys are compared
a bucket at a time on scratch disk, and the prompts come out in collect's order. Bucketed
three documents at a time, it decides exactly as in one bucket (FAKE generator)."""

from pathlib import Path

import pyarrow as pa
import pytest

from batch_pipeline.briefs import prepare
from batch_pipeline.briefs.prepare import ReadDocument, brief_key, prepare_briefs
from batch_pipeline.config.prompt import load_prompt
from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.stages.collect import COLLECTED_SCHEMA, DELETED, FAILED, NEW, UNCHANGED
from batch_pipeline.state.staging import StageWriter, read_batches, stamped_collect_schema

REPO = Path(__file__).resolve().parents[2]
FINGERPRINT = "fp-1"


def collected(path: Path, rows: list[dict], full: bool = True) -> Path:
    with StageWriter(path, stamped_collect_schema(COLLECTED_SCHEMA, full=full)) as writer:
        for row in rows:
            writer.write(row)
    return path


def doc(doc_id: str, status: str = NEW, text: str | None = None) -> dict:
    return {"doc_id": doc_id, "status": status, "content_hash": f"h-{doc_id}", "text": text}


# ten documents in collect's order, and what the generation holds
ROWS = [
    doc("a.md", text="alpha"),  # new: briefed
    doc("b.md", UNCHANGED),  # fresh: landed under its key
    doc("c.md", UNCHANGED),  # stale, not read by collect: read here
    doc("d.md", DELETED) | {"content_hash": None},  # deleted, brief landed: to delete
    doc("e.md", FAILED) | {"content_hash": None},  # unreadable at collect: keeps its brief
    doc("f.md", text="foxtrot"),  # failed under this key before: not tried again
    doc("g.md", text="golf"),  # landed under an older key: stale
    doc("h.md", UNCHANGED),  # stale, and the source cannot read it now
    doc("i.md", text="india"),
    doc("j.md", DELETED) | {"content_hash": None},  # deleted, never briefed: nothing to do
]
LANDED = {
    "b.md": brief_key("b.md", "h-b.md", FINGERPRINT),
    "d.md": "old",
    "e.md": "old",
    "g.md": "old",
    "gone.md": "old",  # a brief whose document collect no longer lists
}
FAILED_BEFORE = {"f.md": brief_key("f.md", "h-f.md", FINGERPRINT)}


def read(ids: list[str]):
    for doc_id in ids:
        if doc_id == "h.md":
            yield ReadDocument(doc_id, error="unreadable: gone")
        else:
            yield ReadDocument(doc_id, title=doc_id.upper(), text=f"read {doc_id}")


def run_prepare(tmp_path: Path, name: str, full: bool = True):
    source = collected(tmp_path / f"{name}-collected.parquet", ROWS, full)
    landed = pa.table({"doc_id": list(LANDED), "input_hash": list(LANDED.values())})
    out = tmp_path / f"{name}-prompts.parquet"
    summary = prepare_briefs(
        source,
        out,
        landed.to_batches(max_chunksize=2),
        landed.num_rows,
        FAILED_BEFORE,
        FINGERPRINT,
        load_prompt(REPO / "data" / "brief_prompt.yaml", ("title", "doc_id", "text")),
        40,
        FakeGenerator(),
        read,
        lambda doc_id: "handbook",
    )
    prompts = [row for batch in read_batches(out) for row in batch.to_pylist()]
    return summary, prompts


def test_the_stale_documents_prompts_come_out_in_collect_order(tmp_path):
    summary, prompts = run_prepare(tmp_path, "one")
    assert [p["doc_id"] for p in prompts] == ["a.md", "g.md", "i.md", "c.md"]  # read c last
    by_doc = {p["doc_id"]: p for p in prompts}
    assert by_doc["c.md"]["title"] == "C.MD" and "read c.md" in by_doc["c.md"]["user"]
    assert by_doc["g.md"]["input_hash"] == brief_key("g.md", "h-g.md", FINGERPRINT)
    assert (summary.documents, summary.stale, summary.fresh) == (10, 4, 1)
    assert (summary.failed_before, summary.read_here) == (1, 1)
    assert summary.unreadable == {"h.md": "unreadable: gone"}
    assert summary.deleted == ["d.md", "gone.md"]
    assert summary.live == {"handbook": 7}  # what a full pass expects briefed: e.md failed


def test_many_buckets_decide_exactly_as_one(tmp_path, monkeypatch):
    whole = run_prepare(tmp_path, "one")
    monkeypatch.setattr(prepare, "BUCKET_DOCS", 3)  # 4 buckets; row ranges cross batches
    bucketed = run_prepare(tmp_path, "many")
    assert bucketed[1] == whole[1]
    assert bucketed[0].record() == whole[0].record()


@pytest.mark.parametrize("bucket_docs", [3, 65_536])
def test_a_targeted_run_deletes_only_what_collect_found_deleted(tmp_path, monkeypatch, bucket_docs):
    monkeypatch.setattr(prepare, "BUCKET_DOCS", bucket_docs)
    summary, _ = run_prepare(tmp_path, "targeted", full=False)
    assert summary.deleted == ["d.md"]  # gone.md is not in a targeted run's view
