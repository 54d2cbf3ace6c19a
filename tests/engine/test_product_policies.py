"""The policies every product follows because it is a product, shown on each of the three:
the run frame's mass-deletion guard, `generations.review: every_run`, and the retention of
retired generations. No product writes any of them; the frame (`runs.landing`) and the
reviewer (`GenerationReviewer`) do."""

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from batch_pipeline.config import load_config
from batch_pipeline.generations.registry import DROPPED, RETIRED
from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.products import configured_products
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import write_corpus

REPO = Path(__file__).resolve().parents[2]
DAY = "2026-11-29"
PRODUCTS = ["vector_index", "document_briefs", "ticket_intents"]


def sample_tickets(count: int = 12) -> list[dict]:
    rows = [json.loads(line) for line in (REPO / "data" / "tickets" / f"{DAY}.jsonl").open()]
    return [r for r in rows if r.get("body") and r["created_at"].startswith(DAY)][:count]


class Workspace:
    """One collection with briefs, and the ticket intents, over folders; the products' runs
    with the FAKE embedder and generator (the policies, not the models, are under test)."""

    def __init__(self, root: Path, embedder, generations: str = "") -> None:  # noqa: ANN001
        self.root = root
        self.embedder = embedder
        self.docs = write_corpus(root / "docs")
        for name in ("brief_prompt.yaml", "brief_schema.json", "intent_taxonomy.yaml"):
            shutil.copy(REPO / "data" / name, root / name)
        labelled = (REPO / "data" / "tickets_eval.jsonl").read_text().splitlines()
        (root / "eval.jsonl").write_text("\n".join(labelled[:40]) + "\n")
        (root / "exports").mkdir()
        self.write_tickets(sample_tickets())
        (root / "pipeline.yaml").write_text(
            "collections:\n"
            "  - name: handbook\n"
            '    source: {kind: filesystem, path: docs, glob: "**/*"}\n'
            "    briefs: {prompt: brief_prompt.yaml, output_schema: brief_schema.json}\n"
            "tickets:\n"
            "  source: {kind: filesystem, path: exports}\n"
            "  taxonomy: intent_taxonomy.yaml\n"
            "  evaluation: {path: eval.jsonl, tolerance: 1.0, min_accuracy: 0.0}\n"
            '  start_date: "2026-11-20"\n' + generations
        )
        self.generator = FakeGenerator()

    def write_tickets(self, tickets: list[dict]) -> None:
        lines = "\n".join(json.dumps(t) for t in tickets) + "\n"
        (self.root / "exports" / f"{DAY}.jsonl").write_text(lines)

    def product(self, kind: str):  # noqa: ANN201 - a products.Product
        config = load_config(self.root / "pipeline.yaml")
        storage = resolve_storage(str(self.root / "home"))
        tracking, store = TrackingStore(storage.tracking_url), VectorStore(storage.lancedb_uri)
        products = configured_products(config, storage, tracking, store, generator=self.generator)
        (product,) = [p for p in products if p.kind == kind]
        return product

    def run(self, product, run_id: str, allow_mass_delete: bool = False):  # noqa: ANN001, ANN201
        """One run of the product's partition; its land's summary."""
        engine, embedder = product.engine, self.embedder
        if product.kind == "vector_index":
            partition, runner = engine, lambda: embedder
        elif product.kind == "document_briefs":
            partition, runner = engine.partition("handbook"), lambda: self.generator
        else:
            partition, runner = engine.day(DAY), lambda: embedder
        return partition.run(run_id, runner, allow_mass_delete=allow_mass_delete)["land"]

    def lose_inputs(self, kind: str) -> None:
        """What an unmounted volume or a truncated export looks like: most inputs gone."""
        if kind == "ticket_intents":
            self.write_tickets(sample_tickets()[:2])  # 10 of 12 gone
            return
        shutil.rmtree(self.docs)
        self.docs.mkdir()  # every document gone

    def rows(self, product) -> int:  # noqa: ANN001
        return product.engine.store.count_rows(product.index)


@pytest.mark.parametrize("kind", PRODUCTS)
def test_every_product_holds_back_a_mass_deletion_until_it_is_confirmed(
    kind, tmp_path, fake_embedder
):
    ws = Workspace(tmp_path, fake_embedder)
    product = ws.product(kind)
    ws.run(product, "run-1")
    before = ws.rows(product)
    assert before > 0
    ws.lose_inputs(kind)

    held = ws.run(ws.product(kind), "run-2")
    assert held.deletions_held > 0
    assert "more than limits.max_delete_fraction (0.5)" in held.deletions_held_reason
    whose = {"ticket_intents": f"tickets of {DAY}"}.get(kind, "documents of handbook")
    assert f"landed {whose} (" in held.deletions_held_reason  # it names what it weighed
    assert ws.rows(product) == before  # nothing was deleted
    (record, *_) = product.engine.tracking.partition_runs(
        [DAY if kind == "ticket_intents" else "handbook"], 1, product.index
    )
    assert record["run_id"] == "run-2" and record["deletions_held"] == held.deletions_held

    confirmed = ws.run(ws.product(kind), "run-3", allow_mass_delete=True)
    assert confirmed.deletions_held == 0
    assert ws.rows(product) < before


@pytest.mark.parametrize("kind", PRODUCTS)
def test_every_product_reviews_again_on_every_run_only_when_configured(
    kind, tmp_path, fake_embedder
):
    def embedder_for(model):  # noqa: ANN001, ANN202
        return fake_embedder

    for policy, evaluated in (("on_change", False), ("every_run", True)):
        ws = Workspace(tmp_path / policy, fake_embedder, f"generations: {{review: {policy}}}\n")
        product = ws.product(kind)
        ws.run(product, "run-1")
        assert product.review(embedder_for).evaluated
        again = ws.product(kind).review(embedder_for)
        assert again.evaluated is evaluated, policy


@pytest.mark.parametrize("kind", PRODUCTS)
def test_every_product_drops_retired_generations_after_their_retention(
    kind, tmp_path, fake_embedder
):
    ws = Workspace(tmp_path, fake_embedder, "generations: {retention_days: 2}\n")
    product = ws.product(kind)
    ws.run(product, "run-1")
    reviewer = product.reviewer
    registry, name = reviewer.registry, product.name
    registry.promote(name, product.fingerprint, "first", already_live_ok=True)
    newer = registry.ensure(name, "f" * 16, f"{name}__{'f' * 16}", {})
    registry.promote(name, newer.fingerprint, "a newer configuration")
    assert registry.get(name, product.fingerprint).state == RETIRED
    store = product.engine.store

    assert reviewer.drop_retired() == []  # retired just now: kept for rollback
    assert store.has_table(product.index)
    later = datetime.now(UTC) + timedelta(days=2.1)
    assert reviewer.drop_retired(now=later) == [product.index]
    assert not store.has_table(product.index)
    assert registry.get(name, product.fingerprint).state == DROPPED
    assert registry.audit_log(name)[-1].action == "drop"
