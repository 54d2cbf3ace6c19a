"""The policies every product follows because it is a product, shown on every kind the
registry holds (the built-in ones and the test product `tests/lengths/`, declared), by one
body each that never asks which kind it runs: the run frame's mass-deletion guard,
`generations.review: every_run`, and the retention of retired generations. No product writes
any of them; the frame (`StagedPartition.land_stage`) and the reviewer (`GenerationReviewer`)
do."""

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from batch_pipeline.config import load_config
from batch_pipeline.declaration import Product, ProductTarget
from batch_pipeline.generations.registry import DROPPED, RETIRED
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.products import KINDS, kind_named, product_env, product_targets
from batch_pipeline.runs.landing import UnguardedDeletionError
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.lengths.kind import LENGTHS
from tests.support import write_corpus

REPO = Path(__file__).resolve().parents[2]
DAY = "2026-11-29"
KIND_NAMES = [kind.name for kind in (*KINDS, LENGTHS)]  # every kind there is


def sample_tickets(count: int = 12) -> list[dict]:
    rows = [json.loads(line) for line in (REPO / "data" / "tickets" / f"{DAY}.jsonl").open()]
    return [r for r in rows if r.get("body") and r["created_at"].startswith(DAY)][:count]


class Workspace:
    """One collection with every product a collection can have, and the ticket intents, over
    folders; each product's runs on the FAKE embedder or generator, as its model needs (the
    policies, not the models, are under test)."""

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
            "    related: {k: 1, candidates: 2}\n"
            "tickets:\n"
            "  source: {kind: filesystem, path: exports}\n"
            "  taxonomy: intent_taxonomy.yaml\n"
            "  evaluation: {path: eval.jsonl, tolerance: 1.0, min_accuracy: 0.0}\n"
            '  start_date: "2026-11-20"\n'
            "products:\n"
            "  lengths:\n"
            "    declaration: tests.lengths.kind:LENGTHS\n"
            "    collections: [handbook]\n"
            "    buckets: [100, 200]\n" + generations
        )
        self.generator = FakeGenerator()

    def write_tickets(self, tickets: list[dict]) -> None:
        lines = "\n".join(json.dumps(t) for t in tickets) + "\n"
        (self.root / "exports" / f"{DAY}.jsonl").write_text(lines)

    def target(self, kind: str) -> ProductTarget:
        config = load_config(self.root / "pipeline.yaml")
        (target,) = [t for t in product_targets(config) if t.kind == kind]
        return target

    def product(self, kind: str) -> Product:
        """The workspace's one product of `kind`, opened through the registry."""
        config = load_config(self.root / "pipeline.yaml")
        storage = resolve_storage(str(self.root / "home"))
        tracking, store = TrackingStore(storage.tracking_url), VectorStore(storage.lancedb_uri)
        env = product_env(config, storage, tracking, store, self.generator)
        return kind_named(kind, config).open(env, self.target(kind))

    def key(self, kind: str) -> str:
        """The partition a run of the product takes: its collection, or the sample's day."""
        return self.target(kind).collection or DAY

    def run_inputs(self, kind: str, run_id: str = "inputs") -> None:
        """Bring the products the kind reads (its declared inputs: the related documents'
        live index) up to date with the sources, deletions confirmed: the product under test
        meets every change, and its own guard."""
        config = load_config(self.root / "pipeline.yaml")
        for needed in kind_named(kind, config).inputs:
            self.run(needed, f"{run_id}-{needed}", allow_mass_delete=True)
            self.product(needed).review(lambda model: self.embedder)

    def run(self, kind: str, run_id: str, allow_mass_delete: bool = False):  # noqa: ANN201
        """One run of the product's partition (after its inputs', `run_inputs`), on the FAKE
        engine its model needs; the landing (the product's summary and the frame's record)."""
        self.run_inputs(kind, run_id)
        partition = self.product(kind).partition(self.key(kind))

        def engine():  # noqa: ANN202
            return self.generator if isinstance(partition.model, ChatModel) else self.embedder

        return partition.run(run_id, engine, allow_mass_delete=allow_mass_delete)["land"]

    def lose_inputs(self) -> None:
        """What an unmounted volume or a truncated export looks like, for every product at
        once: every document gone, and 10 of the day's 12 tickets."""
        shutil.rmtree(self.docs)
        self.docs.mkdir()
        self.write_tickets(sample_tickets()[:2])

    def rows(self, kind: str) -> int:
        product = self.product(kind)
        return product.store.count_rows(product.index)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_product_holds_back_a_mass_deletion_until_it_is_confirmed(
    kind, tmp_path, fake_embedder
):
    ws = Workspace(tmp_path, fake_embedder)
    ws.run(kind, "run-1")
    before = ws.rows(kind)
    assert before > 0
    ws.lose_inputs()

    held = ws.run(kind, "run-2")
    assert held.deletions_held > 0
    assert "more than limits.max_delete_fraction (0.5)" in held.deletions_held_reason
    unit = ws.product(kind).partition(ws.key(kind)).unit
    assert f"landed {unit} of {ws.key(kind)} (" in held.deletions_held_reason  # what it weighed
    assert held.metadata()["deletions_held"] == held.deletions_held  # the frame's, reported
    assert ws.rows(kind) == before  # nothing was deleted
    product = ws.product(kind)
    (record, *_) = product.product.tracking.partition_runs([ws.key(kind)], 1, product.index)
    assert record["run_id"] == "run-2" and record["deletions_held"] == held.deletions_held

    confirmed = ws.run(kind, "run-3", allow_mass_delete=True)
    assert confirmed.deletions_held == 0
    assert ws.rows(kind) < before


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_land_that_deletes_past_the_guard_fails_in_the_frame(
    kind, tmp_path, fake_embedder, monkeypatch
):
    """A product's land that removes inputs without the guard's clearance fails the run: the
    frame holds every land's reported deletions against what the guard cleared."""
    ws = Workspace(tmp_path, fake_embedder)
    ws.run(kind, "run-1")
    ws.lose_inputs()
    partition_class = kind_named(kind, load_config(tmp_path / "pipeline.yaml")).partition
    monkeypatch.setattr(  # a land that never asks, as a careless product would write it
        partition_class, "land", _land_without_asking(partition_class.land)
    )
    with pytest.raises(UnguardedDeletionError, match="cleared 0"):
        ws.run(kind, "run-2", allow_mass_delete=True)


def _land_without_asking(land):  # noqa: ANN001, ANN202
    def unasked(self, run, request, files):  # noqa: ANN001, ANN202
        run.hold_deletions = lambda deleting, adding=0: None  # deletes, and never asks
        return land(self, run, request, files)

    return unasked


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_product_reviews_again_on_every_run_only_when_configured(
    kind, tmp_path, fake_embedder
):
    def embedder_for(model):  # noqa: ANN001, ANN202
        return fake_embedder

    for policy, evaluated in (("on_change", False), ("every_run", True)):
        ws = Workspace(tmp_path / policy, fake_embedder, f"generations: {{review: {policy}}}\n")
        product = ws.product(kind)
        ws.run(kind, "run-1")
        assert product.review(embedder_for).evaluated
        again = ws.product(kind).review(embedder_for)
        assert again.evaluated is evaluated, policy


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_product_drops_retired_generations_after_their_retention(
    kind, tmp_path, fake_embedder
):
    ws = Workspace(tmp_path, fake_embedder, "generations: {retention_days: 2}\n")
    product = ws.product(kind)
    ws.run(kind, "run-1")
    reviewer = product.reviewer
    registry, name = reviewer.registry, product.name
    registry.promote(name, product.fingerprint, "first", already_live_ok=True)
    newer = registry.ensure(name, "f" * 16, f"{name}__{'f' * 16}", {})
    registry.promote(name, newer.fingerprint, "a newer configuration")
    assert registry.get(name, product.fingerprint).state == RETIRED
    store = product.product.store

    assert reviewer.drop_retired() == []  # retired just now: kept for rollback
    assert store.has_table(product.index)
    later = datetime.now(UTC) + timedelta(days=2.1)
    assert reviewer.drop_retired(now=later) == [product.index]
    assert not store.has_table(product.index)
    assert registry.get(name, product.fingerprint).state == DROPPED
    assert registry.audit_log(name)[-1].action == "drop"


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_cli_run_with_trigger_schedule_drops_every_products_retired_generations(
    kind, tmp_path, fake_embedder, monkeypatch, capsys
):
    """Cron deployments say `run --trigger schedule`: that run is nightly for every product,
    as the Dagster schedules' are (forced review, retention), through the one `run`."""
    from batch_pipeline.cli import main
    from batch_pipeline.cli.context import CommandContext

    ws = Workspace(tmp_path, fake_embedder, "generations: {retention_days: 1}\n")
    product = ws.product(kind)
    registry, name = product.reviewer.registry, product.name
    old = registry.ensure(name, "e" * 16, f"{name}__{'e' * 16}", {})
    week_ago = (datetime.now(UTC) - timedelta(days=7)).timestamp()
    registry.update(name, old.fingerprint, state=RETIRED, retired_at=week_ago)
    env = CommandContext.product_env
    monkeypatch.setattr(  # the FAKE engines: the policy, not the models, is under test
        CommandContext,
        "product_env",
        lambda ctx, args=None: replace(env(ctx, args), generator=ws.generator),
    )
    monkeypatch.setattr(CommandContext, "runners", lambda ctx, args: lambda model: fake_embedder)
    base = ["--config", str(tmp_path / "pipeline.yaml"), "--home", str(tmp_path / "home")]
    args = ["run", "--kind", kind, "--partition", ws.key(kind)]
    ws.run_inputs(kind)

    assert main([*base, *args]) == 0  # a manual run keeps them
    assert registry.get(name, old.fingerprint).state == RETIRED
    capsys.readouterr()
    assert main([*base, *args, "--trigger", "schedule", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["generations_dropped"] == [old.index_name]
    assert registry.get(name, old.fingerprint).state == DROPPED
    assert report["product"] == name and report["partition"] == ws.key(kind)
