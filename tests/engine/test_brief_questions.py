"""A brief's questions as retrieval rows (`briefs.index_questions`), with the FAKE generator
and the FAKE embedder: they land beside the live index tied to their document, a rerun
embeds nothing, an edit replaces that document's questions only, a deletion removes them,
search finds them, and the run measures retrieval with and without them."""

import json
from pathlib import Path

import pytest

from batch_pipeline.briefs import prepare, questions
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import open_partition
from batch_pipeline.index.search import search
from batch_pipeline.inference.fake import FakeEmbedder, FakeGenerator
from batch_pipeline.names import question_index
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import write_briefs_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
EVAL = [
    {"query": "reset my password", "relevant": ["account/reset-password.md"]},
    {"query": "when do refunds arrive", "relevant": ["refunds.md"]},
]


@pytest.fixture()
def ws(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    (tmp_path / "eval.jsonl").write_text("\n".join(json.dumps(q) for q in EVAL))
    config = write_briefs_config(
        tmp_path,
        ", document_tokens: 40, index_questions: true",
        collection="    evaluation: {path: eval.jsonl, k: 3, tolerance: 1.0}\n",
    )
    return {"root": tmp_path, "docs": docs, "config": config, "home": tmp_path / "home"}


class Pipelines:
    """The collection's index and briefs on one home, with the fakes behind both."""

    def __init__(self, ws: dict) -> None:
        self.config = load_config(ws["config"])
        self.storage = resolve_storage(str(ws["home"]))
        self.tracking = TrackingStore(self.storage.tracking_url)
        self.store = VectorStore(self.storage.lancedb_uri)
        self.index = self.documents("handbook")
        self.generator = FakeGenerator()
        self.embedders: list[FakeEmbedder] = []
        self.briefs = BriefProduct(
            self.config,
            self.storage,
            "handbook",
            self.generator,
            self.documents,
            tracking=self.tracking,
            store=self.store,
        )

    def documents(self, key: str) -> IndexPartition:
        return open_partition(self.config, self.storage, key, self.tracking, self.store)

    def embedder_for(self, model) -> FakeEmbedder:  # noqa: ANN001
        self.embedders.append(FakeEmbedder(model))
        return self.embedders[-1]

    def embedded(self) -> int:
        return sum(e.texts_embedded for e in self.embedders)

    def nightly(self, run_id: str):  # noqa: ANN201 - what the embedding job runs, in order
        self.index.run(run_id, lambda: FakeEmbedder(self.index.model))
        self.index.product.review(self.embedder_for)
        self.briefs.partition("handbook").run(run_id, lambda: self.generator)
        self.briefs.review(self.embedder_for)
        return self.briefs.land_questions(self.embedder_for, run_id)

    def question_rows(self) -> list[dict]:
        table = self.store.open(question_index(self.index.index))
        rows = table.search().limit(None).to_arrow().to_pylist() if table is not None else []
        return sorted(rows, key=lambda r: r["chunk_id"])


def test_questions_land_beside_the_live_index_tied_to_their_document(ws):
    pipes = Pipelines(ws)
    result = pipes.nightly("run-1")
    assert result.status == "landed"
    briefs = {r["doc_id"]: r for r in pipes.briefs.briefs.rows(pipes.briefs.index)}
    rows = pipes.question_rows()
    assert len(rows) == 9 and result.metadata()["question_rows"] == 9
    for row in rows:
        brief = briefs[row["doc_id"]]
        assert row["text"] in brief["questions"] and row["section"] == "question"
        assert row["chunk_id"] == f"{row['doc_id']}#question{row['chunk_index']}"
        assert row["input_hash"] == f"{pipes.briefs.index}:{brief['input_hash']}"
        assert row["model_fingerprint"] == pipes.index.fingerprint
        assert row["run_id"] == "run-1" and row["content_hash"] == brief["content_hash"]
    # the index table itself holds chunks only
    assert pipes.store.count_rows(pipes.index.index, "section = 'question'") == 0
    scores = result.scores
    assert set(scores) == {
        "recall_at_3_chunks",
        "mrr_at_3_chunks",
        "ndcg_at_3_chunks",
        "recall_at_3_with_questions",
        "mrr_at_3_with_questions",
        "ndcg_at_3_with_questions",
        "evaluation_queries",
    }
    asked = rows[0]["text"]
    hits = search(
        pipes.index.product, asked, k=3, runner=FakeEmbedder(pipes.index.model), mode="vector"
    )
    assert (hits[0].doc_id, hits[0].chunk_id, hits[0].section) == (
        rows[0]["doc_id"],
        rows[0]["chunk_id"],
        "question",
    )
    assert hits[0].score == pytest.approx(1.0)


@pytest.mark.parametrize("bucket_docs", [16_384, 1], ids=["one-bucket", "a-bucket-per-doc"])
def test_a_rerun_embeds_nothing_an_edit_replaces_one_document_and_a_deletion_removes_it(
    ws, monkeypatch, bucket_docs
):
    # briefs' prepare and the question rows compare keys in on-disk buckets by doc id: one
    # bucket per document decides exactly as one bucket for all
    monkeypatch.setattr(questions, "BUCKET_DOCS", bucket_docs)
    monkeypatch.setattr(prepare, "BUCKET_DOCS", bucket_docs)
    pipes = Pipelines(ws)
    pipes.nightly("run-1")
    before = {r["chunk_id"]: r for r in pipes.question_rows()}
    rerun = pipes.nightly("run-2")
    assert rerun.metadata()["questions_embedded"] == 0
    assert {r["chunk_id"]: r for r in pipes.question_rows()} == before
    page = ws["docs"] / "refunds.md"
    page.write_text(page.read_text() + "\nRefunds now take ten days to arrive.\n")
    edited = pipes.nightly("run-3")
    assert edited.metadata()["questions_embedded"] == 3
    assert edited.metadata()["question_documents_updated"] == 1
    after = {r["chunk_id"]: r for r in pipes.question_rows()}
    assert {c for c, r in after.items() if r["run_id"] == "run-3"} == {
        f"refunds.md#question{n}" for n in range(3)
    }
    assert all(after[c] == before[c] for c in after if not c.startswith("refunds.md#"))
    (ws["docs"] / "notes.txt").unlink()
    deleted = pipes.nightly("run-4")
    assert deleted.metadata()["question_documents_removed"] == 1
    assert {r["doc_id"] for r in pipes.question_rows()} == {
        "account/reset-password.md",
        "refunds.md",
    }


def test_off_by_default_then_turned_on_it_lands_the_live_briefs_without_regenerating(ws, tmp_path):
    ws["config"].write_text(ws["config"].read_text().replace(", index_questions: true", ""))
    pipes = Pipelines(ws)
    assert pipes.nightly("run-1").status.startswith("off")
    assert pipes.question_rows() == []
    ws["config"].write_text(ws["config"].read_text().replace("40}", "40, index_questions: true}"))
    on = Pipelines(ws)
    assert on.briefs.index == pipes.briefs.index  # the setting is not part of the brief
    assert on.briefs.land_questions(on.embedder_for, "run-2").status == "landed"
    assert len(on.question_rows()) == 9 and on.generator.generated == []
    fresh = Pipelines({**ws, "home": tmp_path / "fresh"})  # no brief generation live there
    waiting = fresh.briefs.land_questions(fresh.embedder_for, "run-0")
    assert waiting.status.startswith("waiting") and fresh.embedded() == 0


def test_index_questions_needs_a_questions_array_in_the_schema(ws):
    schema_path = ws["root"] / "schema.json"
    schema = json.loads(schema_path.read_text())
    del schema["properties"]["questions"]
    schema["required"] = [r for r in schema.get("required", []) if r != "questions"]
    schema_path.write_text(json.dumps(schema))
    with pytest.raises(ConfigError, match="index_questions.*'questions' property"):
        load_config(ws["config"])


def test_a_where_on_a_field_declared_after_the_questions_landed_searches_the_chunks(ws):
    page = ws["docs"] / "refunds.md"
    page.write_text("---\nproduct: billing\n---\n" + page.read_text())
    Pipelines(ws).nightly("run-1")
    ws["config"].write_text(
        ws["config"]
        .read_text()
        .replace("    source:", "    metadata: {fields: {product: string}}\n    source:")
    )
    pipes = Pipelines(ws)
    assert pipes.nightly("run-2").metadata()["questions_embedded"] == 0
    assert "product" not in pipes.store.open(question_index(pipes.index.index)).schema.names

    hits = search(
        pipes.index.product,
        "refunds",
        k=3,
        runner=FakeEmbedder(pipes.index.model),
        where="product = 'billing'",
    )
    assert hits and {(h.doc_id, h.metadata["product"]) for h in hits} == {("refunds.md", "billing")}
    assert all(h.section != "question" for h in hits)


def test_a_question_land_waits_for_another_run_s_lease_on_its_table(ws):
    """Each shard's run lands the collection's questions: one run at a time per question
    table, under its landing lease, so two runs never write it together and the second finds
    nothing to do. The land reports the table's indexes as it left them, under the lease."""
    import threading

    pipes = Pipelines(ws)
    pipes.index.run("run-1", lambda: FakeEmbedder(pipes.index.model))
    pipes.index.product.review(pipes.embedder_for)
    pipes.briefs.partition("handbook").run("run-1", lambda: pipes.generator)
    pipes.briefs.review(pipes.embedder_for)
    table = question_index(pipes.index.index)
    landed = []
    with pipes.tracking.landing_lease(table, owner="another-shard-run"):
        worker = threading.Thread(
            target=lambda: landed.append(pipes.briefs.land_questions(pipes.embedder_for, "run-2"))
        )
        worker.start()
        worker.join(timeout=2.0)
        assert worker.is_alive() and not landed  # waiting for the lease
        assert pipes.store.open(table) is None
    worker.join(timeout=60)
    (result,) = landed
    assert result.metadata()["questions_embedded"] == 9
    health = result.index_health
    assert set(health.states) == {table} and health.ok, health.problems
    assert health.metadata()["unindexed_rows"] == 0
    again = pipes.briefs.land_questions(pipes.embedder_for, "run-3")
    assert again.metadata()["questions_embedded"] == 0 and again.index_health.ok
