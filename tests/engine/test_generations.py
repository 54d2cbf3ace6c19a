"""Model generations: build beside live, gated promotion, rollback, run invalidation, drift."""

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from batch_pipeline.config import load_config
from batch_pipeline.generations.drift import drift_report
from batch_pipeline.generations.registry import GenerationError, LiveSwitch
from batch_pipeline.generations.run_history import (
    Invalidation,
    invalidate_run,
    restore_before_run,
)
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.index.product import open_partition
from batch_pipeline.index.search import search
from batch_pipeline.inference.fake import FakeEmbedder
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.names import question_index
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.vector_store import chunk_schema

EVAL = [
    {"query": "I forgot my password", "relevant": ["account/reset-password.md"]},
    {"query": "can I get a refund on a yearly plan", "relevant": ["refunds.md"]},
    {"query": "what time does the office open", "relevant": ["notes.txt"]},
    {"query": "where do visitors sign in", "relevant": ["notes.txt"]},
]


def configure(workspace, extra_collection: str = "", extra: str = "", tolerance: float = 0.0):
    (workspace["root"] / "eval.jsonl").write_text("\n".join(json.dumps(q) for q in EVAL))
    workspace["config"].write_text(
        "collections:\n  - name: handbook\n"
        '    source: {kind: filesystem, path: docs, glob: "**/*"}\n'
        f"    evaluation: {{path: eval.jsonl, k: 3, tolerance: {tolerance}}}\n"
        + extra_collection
        + extra
    )


def pipeline_for(workspace) -> IndexPartition:
    config = load_config(workspace["config"])
    return open_partition(config, resolve_storage(str(workspace["home"])), "handbook")


def ids(hits):
    return [(h.doc_id, h.chunk_id) for h in hits]


def runner_for(runner):
    """The session's fp32 model for the default config; other configs load their own."""
    return lambda model: (
        runner if model == runner.resolved else EmbeddingRunner(model, "cpu", "float32")
    )


def test_a_new_generation_builds_beside_live_and_is_promoted_only_when_complete(workspace, runner):
    configure(workspace, tolerance=1.0)
    first = pipeline_for(workspace)
    first.run("run-1", runner)
    assert first.product.registry.live("handbook").index_name == first.index
    hits_before = ids(search(first.product, "reset my password", 3, runner))

    configure(workspace, "    chunking: {max_tokens: 64, overlap_tokens: 8}\n", tolerance=1.0)
    second = pipeline_for(workspace)
    assert second.index != first.index
    second.run(
        "run-2", lambda: runner_for(runner)(second.model), doc_ids=["refunds.md"]
    )  # partial: building
    review = second.product.review(runner_for(runner))
    assert review.decision == "refused" and "not complete" in review.reason
    assert second.product.record().state == "building"
    # readers still get the old generation, untouched
    assert second.product.live().index == first.index
    assert ids(search(second.product, "reset my password", 3, runner)) == hits_before
    assert second.store.open(first.index).count_rows() == first.store.open(first.index).count_rows()

    second.run("run-3", lambda: runner_for(runner)(second.model))  # the backfill: a full pass
    review = second.product.review(runner_for(runner))
    assert review.decision == "promoted", review
    assert set(review.scores) == {"candidate", "live"}
    assert second.product.registry.live("handbook").index_name == second.index
    assert second.product.live().index == second.index
    assert (
        search(second.product, "reset my password", 3, runner)[0].doc_id
        == "account/reset-password.md"
    )
    states = {g.index_name: g.state for g in second.product.registry.list_all("handbook")}
    assert states == {first.index: "retired", second.index: "live"}

    # rollback brings the previous live generation back, audited
    moved = second.product.registry.rollback("handbook", actor="alice")
    assert moved == LiveSwitch(previous=second.index, live=first.index, action="rollback")
    assert second.product.live().index == first.index
    assert ids(search(second.product, "reset my password", 3, runner)) == hits_before
    log = second.product.registry.audit_log("handbook")
    assert [(e.action, e.from_index, e.to_index) for e in log] == [
        ("promote", None, first.index),
        ("promote", first.index, second.index),
        ("promote", second.index, first.index),
    ]
    assert log[-1].actor == "alice" and log[-1].details == "rollback" and log[-1].at


def test_a_worse_candidate_is_refused(workspace, runner):
    configure(workspace)
    first = pipeline_for(workspace)
    first.run("run-1", runner)
    configure(workspace, extra="model: {max_seq_length: 6}\n")  # truncates every input
    worse = pipeline_for(workspace)
    worse.run("run-2", lambda: runner_for(runner)(worse.model))
    review = worse.product.review(runner_for(runner))
    assert review.decision == "refused"
    assert "worse than live" in review.reason
    assert review.scores["candidate"]["mrr_at_3"] < review.scores["live"]["mrr_at_3"]
    assert worse.product.registry.live("handbook").index_name == first.index
    assert worse.product.record().state == "candidate"
    with pytest.raises(GenerationError, match="already live"):
        worse.product.registry.promote("handbook", first.fingerprint, "again")


def test_without_an_evaluation_set_completeness_alone_promotes_with_a_warning(workspace, runner):
    workspace["config"].write_text(
        "collections:\n  - name: handbook\n"
        '    source: {kind: filesystem, path: docs, glob: "**/*"}\n'
    )
    pipeline_for(workspace).run("run-1", runner)
    workspace["config"].write_text(
        workspace["config"].read_text() + "    chunking: {max_tokens: 64, overlap_tokens: 8}\n"
    )
    second = pipeline_for(workspace)
    second.run("run-2", lambda: runner_for(runner)(second.model))
    review = second.product.review(runner_for(runner))
    assert review.decision == "promoted" and "completeness alone" in review.reason
    assert review.warnings == ("no evaluation set is configured, so no scores were compared",)
    assert review.metadata()["warnings"] == list(review.warnings)


def test_invalidate_run_reembeds_exactly_that_runs_rows(make_pipeline, fake_embedder, workspace):
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    path = workspace["docs"] / "account" / "reset-password.md"
    path.write_text(path.read_text().replace("spam folder", "junk folder"))
    pipeline.run("run-2", fake_embedder)
    rows = pipeline.store.scan(pipeline.index, ["chunk_id", "run_id", "embedded_at"]).to_pylist()
    by_run2 = {r["chunk_id"] for r in rows if r["run_id"] == "run-2"}
    others = {r["chunk_id"]: r["embedded_at"] for r in rows if r["run_id"] != "run-2"}
    assert by_run2
    result = invalidate_run(pipeline.tracking, pipeline.store, pipeline.product.registry, "run-2")
    assert result == Invalidation(rows=len(by_run2), documents=1)
    out = pipeline.run("run-3", fake_embedder)
    assert out["execute"].stats.inputs == len(by_run2)
    after = pipeline.store.scan(pipeline.index, ["chunk_id", "run_id", "embedded_at"]).to_pylist()
    assert {r["chunk_id"] for r in after if r["run_id"] == "run-3"} == by_run2
    assert {r["chunk_id"]: r["embedded_at"] for r in after if r["run_id"] != "run-3"} == others
    with pytest.raises(GenerationError, match="unknown run id 'nope'"):
        invalidate_run(pipeline.tracking, pipeline.store, pipeline.product.registry, "nope")
    actions = [e.action for e in pipeline.product.registry.audit_log("handbook")]
    assert "invalidate_run" in actions


def test_restore_before_a_run_is_audited_and_the_next_run_repairs(
    make_pipeline, fake_embedder, workspace
):
    pipeline = make_pipeline()
    pipeline.run("run-1", fake_embedder)
    (workspace["docs"] / "refunds.md").unlink()
    pipeline.run("run-2", fake_embedder)
    assert "refunds.md" not in set(
        pipeline.store.scan(pipeline.index, ["doc_id"])["doc_id"].to_pylist()
    )
    result = restore_before_run(
        pipeline.tracking, pipeline.store, pipeline.product.registry, "handbook", "run-2"
    )
    assert result.index == pipeline.index
    assert "refunds.md" in set(
        pipeline.store.scan(pipeline.index, ["doc_id"])["doc_id"].to_pylist()
    )
    assert pipeline.product.registry.audit_log("handbook")[-1].action == "restore"
    pipeline.run("run-3", fake_embedder)  # the source still lacks it: the full run converges
    assert "refunds.md" not in set(
        pipeline.store.scan(pipeline.index, ["doc_id"])["doc_id"].to_pylist()
    )


def test_drift_check_passes_untouched_and_names_a_corrupted_vector(make_pipeline, runner):
    pipeline = make_pipeline()
    pipeline.run("run-1", runner)
    report = drift_report(pipeline.store, pipeline.index, runner, sample=100, min_cosine=0.999)
    assert report.passed and report.min_cosine > 0.999
    table = pipeline.store.open(pipeline.index)
    victim = table.search().select(["chunk_id", "vector"]).limit(1).to_list()[0]
    planted = np.roll(np.asarray(victim["vector"]), 7).tolist()
    table.update(where=f"chunk_id = '{victim['chunk_id']}'", values={"vector": planted})
    report = drift_report(pipeline.store, pipeline.index, runner, sample=100, min_cosine=0.999)
    assert not report.passed
    assert report.drifted_chunks == [victim["chunk_id"]]


def test_retired_generations_are_dropped_after_their_retention(workspace, fake_embedder):
    """Only the lifecycle matters here: the FAKE embedder stands in for both models."""
    configure(workspace, tolerance=1.0)
    first = pipeline_for(workspace)
    first.run("run-1", fake_embedder)
    configure(workspace, "    chunking: {max_tokens: 64, overlap_tokens: 8}\n", tolerance=1.0)
    second = pipeline_for(workspace)
    second.run("run-2", lambda: FakeEmbedder(second.model))
    assert second.product.review(FakeEmbedder).decision == "promoted"
    registry = second.product.registry
    questions = question_index(first.index)  # its briefs' questions go with it
    second.store.create_table(questions, chunk_schema(first.model.embedding_dimension))
    reviewer = second.product.reviewer  # generations.retention_days: 7 by default
    assert reviewer.drop_retired() == []
    assert second.store.has_table(first.index) and second.store.has_table(questions)
    assert reviewer.drop_retired(now=datetime.now(UTC) + timedelta(days=7.1)) == [first.index]
    assert not second.store.has_table(first.index) and not second.store.has_table(questions)
    assert registry.get("handbook", first.fingerprint).state == "dropped"
    assert registry.audit_log("handbook")[-1].action == "drop"
    with pytest.raises(GenerationError, match="no retired generation"):
        registry.rollback("handbook")


def test_an_unchanged_generation_keeps_its_review_and_loads_no_model(workspace, fake_embedder):
    configure(workspace, tolerance=1.0)
    loads = []

    def embedder_for(model):  # noqa: ANN001, ANN202
        loads.append(model.name)
        return fake_embedder

    pipeline = pipeline_for(workspace)
    pipeline.run("run-1", fake_embedder)
    first = pipeline.product.review(embedder_for)
    assert first.evaluated and first.decision == "live" and loads
    loads.clear()
    pipeline.run("run-2", fake_embedder)  # nothing changed
    again = pipeline_for(workspace).product.review(embedder_for)
    assert not again.evaluated and loads == []
    assert again.scores == json.loads(json.dumps(first.scores))
    assert again.decision == "live" and again.reason.endswith("(unchanged since the last review)")
    # forced, it decides again, but its scores still hold for the same table and set
    assert pipeline_for(workspace).product.review(embedder_for, force=True).evaluated
    assert loads == []
    (workspace["docs"] / "new.md").write_text("# New\n\nA new page about desks.\n")
    pipeline.run("run-3", fake_embedder)
    assert pipeline_for(workspace).product.review(embedder_for).evaluated  # table changed
    assert loads  # and the new table is scored

    configure(workspace, tolerance=1.0, extra="generations: {review: every_run}\n")
    assert pipeline_for(workspace).product.review(embedder_for).evaluated


def test_reviews_that_promote_the_same_generation_at_once_switch_it_once(sql_url):
    """Two day runs (or two shards) finishing together both pass the gate: the generation is
    switched once, with one audit entry, and no review fails (one did, with "already live",
    and Dagster retried its step). An operator's promote of a live generation still fails."""
    import threading
    import uuid

    from batch_pipeline.generations.registry import GenerationRegistry
    from batch_pipeline.state.tracking import TrackingStore

    tracking = TrackingStore(sql_url)
    registry = GenerationRegistry(tracking)
    name = f"race_{uuid.uuid4().hex[:8]}"
    registry.ensure(name, "old", f"{name}__old", {})
    registry.promote(name, "old", "first complete generation")
    registry.ensure(name, "new", f"{name}__new", {})
    start, errors = threading.Barrier(4), []

    def review() -> None:
        start.wait()
        try:
            registry.promote(name, "new", "gate passed", "pipeline", already_live_ok=True)
        except Exception as error:  # noqa: BLE001 - the test reports every failure
            errors.append(error)

    threads = [threading.Thread(target=review) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert registry.live(name).index_name == f"{name}__new"
    assert registry.get(name, "old").state == "retired"
    switches = [
        (e.from_index, e.to_index) for e in registry.audit_log(name) if e.action == "promote"
    ]
    assert switches == [(None, f"{name}__old"), (f"{name}__old", f"{name}__new")]
    with pytest.raises(GenerationError, match="already live"):
        registry.promote(name, "new", "by hand")
    tracking.dispose()


def test_a_review_overtaken_by_a_land_does_not_undo_its_completeness(sql_url):
    """Four shards land in parallel: one shard's review reads the generation before the last
    shard's land makes it complete (and promotes it), then writes its own verdict. That stale
    verdict must not mark the complete, live generation incomplete (it did: CI's four-shard
    backfill ended live with complete=False), nor leave a key the next review would trust."""
    import uuid

    from batch_pipeline.config import GenerationsConfig
    from batch_pipeline.generations.registry import GenerationRegistry
    from batch_pipeline.generations.review import Completeness, GenerationReviewer
    from batch_pipeline.state.tracking import TrackingStore

    tracking = TrackingStore(sql_url)
    registry = GenerationRegistry(tracking)
    name = f"overtaken_{uuid.uuid4().hex[:8]}"
    registry.ensure(name, "fp", f"{name}__fp", {})

    class RecordedCompleteness:  # as the index's rule: what the lands' tracking recorded
        def assess(self, record, live):  # noqa: ANN001, ANN202
            return Completeness(bool(record.complete), None, {"complete": bool(record.complete)})

    class LandDuringScoring:  # the last shard's land finishes while this review scores
        tolerance, floors = 0.0, {}

        def key(self, record):  # noqa: ANN001, ANN202
            return {"table": record.index_name}

        def score(self, record, embedder_for):  # noqa: ANN001, ANN202
            if not registry.get(name, "fp").complete:
                registry.update(name, "fp", complete=True, state="candidate")
                registry.promote(name, "fp", "first complete generation", "pipeline")
            return {"accuracy": 1.0}

    reviewer = GenerationReviewer(
        registry,
        name,
        RecordedCompleteness(),
        LandDuringScoring(),
        "land it",
        GenerationsConfig(),
        lambda table: None,
    )
    stale = reviewer.review(registry.get(name, "fp"), lambda model: None)
    assert stale.decision == "refused"  # what it found when it read the record, and so
    assert stale.reason.endswith("changed the generation meanwhile; the next review decides)")
    record = registry.get(name, "fp")
    assert record.state == "live" and record.complete  # not undone by the stale verdict
    again = reviewer.review(record, lambda model: None)
    assert again.evaluated and again.decision == "live"  # the stale review left no key
    assert registry.get(name, "fp").complete
    tracking.dispose()


def test_a_review_overtaken_by_a_land_that_completes_the_generation_leaves_no_trusted_key(
    sql_url,
):
    """The briefs' shards: completeness is read from what the lands record (rows, a full
    pass), which no review writes. One shard's review reads the generation one shard short,
    the last shard's land completes it meanwhile, and the stale verdict is written. The last
    shard's review must then decide on the complete generation and promote it, not keep the
    stale verdict as if nothing had changed (CI's four-shard backfill ended with every brief
    landed and none live)."""
    import uuid

    from batch_pipeline.config import GenerationsConfig
    from batch_pipeline.generations.registry import GenerationRegistry
    from batch_pipeline.generations.review import Completeness, GenerationReviewer
    from batch_pipeline.state.tracking import TrackingStore

    tracking = TrackingStore(sql_url)
    registry = GenerationRegistry(tracking)
    name = f"briefed_{uuid.uuid4().hex[:8]}"
    registry.ensure(name, "fp", f"{name}__fp", {})
    registry.update(name, "fp", rows=3, documents=4, full_pass=True)

    class CoversEveryDocument:  # as the briefs' rule: from the lands' counts
        def assess(self, record, live):  # noqa: ANN001, ANN202
            key = {"rows": record.rows, "documents": record.documents}
            complete = bool(record.full_pass and record.rows >= record.documents)
            return Completeness(complete, None if complete else "one brief short", key)

    class LandDuringScoring:  # the last shard's land records its brief while this one scores
        tolerance, floors = 0.0, {}

        def key(self, record):  # noqa: ANN001, ANN202
            return {"table": record.index_name}

        def score(self, record, embedder_for):  # noqa: ANN001, ANN202
            if registry.get(name, "fp").rows < 4:
                registry.update(name, "fp", rows=4)
            return {"valid_share": 1.0}

    reviewer = GenerationReviewer(
        registry,
        name,
        CoversEveryDocument(),
        LandDuringScoring(),
        "land it",
        GenerationsConfig(),
        lambda table: None,
    )
    stale = reviewer.review(registry.get(name, "fp"), lambda model: None)
    assert stale.decision == "refused" and registry.live(name) is None
    last = reviewer.review(registry.get(name, "fp"), lambda model: None)
    assert last.evaluated and last.decision == "promoted"
    assert registry.live(name).fingerprint == "fp"
    tracking.dispose()
