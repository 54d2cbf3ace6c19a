"""A collection's reranker: a generation of its own, reviewed against hybrid search alone on
the evaluation set, and used by `search --rerank` only once promoted."""

import json

import numpy as np
import pytest

from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.index import reranker as reranking
from batch_pipeline.index.product import open_partition
from batch_pipeline.index.reranker import RerankRefusedError
from batch_pipeline.index.search import search
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.inference.scorer import ScoreStats
from batch_pipeline.state.storage import resolve_storage
from tests.support import stand_in_cross_encoder

OFFICE, PASSWORD = "what time does the office open", "I forgot my password"
# hybrid search ranks notes.txt first for OFFICE: labelled refunds.md, a reranker can beat it
EVAL = [
    {"query": OFFICE, "relevant": ["refunds.md"]},
    {"query": PASSWORD, "relevant": ["account/reset-password.md"]},
]
GOOD = {OFFICE: "refund", PASSWORD: "password"}  # the word a query's labelled page holds
BAD = {OFFICE: "visitors", PASSWORD: "office"}  # a word another page holds


class StandInReranker:
    """UNIT-TEST STAND-IN for a reranker's engine: a passage scores 1 when it holds the word
    `markers` gives its query, plus a little for being short; it counts what it scored."""

    backend = "stand-in"

    def __init__(self, markers: dict[str, str]) -> None:
        self.markers = markers
        self.stats = ScoreStats()
        self.load_seconds = 0.0

    def score(self, pairs):
        self.stats.pairs += len(pairs)
        return np.asarray(
            [
                float(self.markers.get(query, "\0") in document.lower()) + 1 / (1 + len(document))
                for query, document in pairs
            ],
            dtype=np.float32,
        )


def runner_for(runner):
    """The session's fp32 model for the default config; other configs load their own."""
    return lambda model: (
        runner if model == runner.resolved else EmbeddingRunner(model, "cpu", "float32")
    )


@pytest.fixture()
def cross_encoder_folder(tmp_path):
    """A folder that reads as a one-label cross-encoder (its engine is stood in for)."""
    return stand_in_cross_encoder(tmp_path / "cross-encoder")


def configure(workspace, reranker: str, evaluation: bool = True, chunking: str = "") -> None:
    (workspace["root"] / "eval.jsonl").write_text("\n".join(json.dumps(q) for q in EVAL))
    workspace["config"].write_text(
        "collections:\n  - name: handbook\n"
        '    source: {kind: filesystem, path: docs, glob: "**/*"}\n'
        + ("    evaluation: {path: eval.jsonl, k: 3, tolerance: 1.0}\n" if evaluation else "")
        + chunking
        + reranker
    )


def partition(workspace):
    config = load_config(workspace["config"])
    return open_partition(config, resolve_storage(str(workspace["home"])), "handbook")


@pytest.fixture()
def engines(monkeypatch):
    """The reranker engines the review and search open, by the folder's name: stood in."""
    opened = {"good": StandInReranker(GOOD), "bad": StandInReranker(BAD)}

    def open_scorer(config, home, device="auto"):
        return opened["good" if "good" in config.model else "bad"]

    monkeypatch.setattr(reranking, "open_scorer", open_scorer)
    return opened


def test_a_reranker_needs_an_evaluation_set_and_a_cross_encoder_or_the_judge(
    workspace, cross_encoder_folder
):
    configure(workspace, f"    reranker: {{model: {cross_encoder_folder}}}\n", evaluation=False)
    with pytest.raises(ConfigError, match=r"collections\[0\]\.reranker: .*evaluation"):
        load_config(workspace["config"])
    configure(workspace, "    reranker: {model: no-such-folder}\n")
    with pytest.raises(ConfigError, match=r"reranker\.model.*no config\.json.*judge"):
        load_config(workspace["config"])
    configure(workspace, f"    reranker: {{model: {cross_encoder_folder}, chat_model: x}}\n")
    with pytest.raises(ConfigError, match="chat_model: only the judge"):
        load_config(workspace["config"])


def test_a_reranker_that_beats_hybrid_search_is_promoted_and_reorders_search(
    workspace, runner, cross_encoder_folder, engines
):
    good = cross_encoder_folder.rename(cross_encoder_folder.with_name("good-cross-encoder"))
    configure(workspace, f"    reranker: {{model: {good}, candidates: 10}}\n")
    index = partition(workspace)
    with pytest.raises(RerankRefusedError, match="not been reviewed yet"):
        search(index.product, "password", 3, runner, rerank=True)
    index.run("run-1", runner)
    review = index.product.review(runner_for(runner))
    (companion,) = review.companions
    assert companion.decision == "promoted", companion.reason
    assert "better than hybrid search alone" in companion.reason
    baseline, candidate = companion.scores["baseline"], companion.scores["candidate"]
    assert candidate["mrr_at_10"] > baseline["mrr_at_10"]
    assert candidate["ndcg_at_10"] > baseline["ndcg_at_10"]

    assert search(index.product, OFFICE, 3, runner, mode="hybrid")[0].doc_id == "notes.txt"
    hits = search(index.product, OFFICE, 3, runner, rerank=True)
    assert hits[0].doc_id == "refunds.md" and hits[0].score >= 1.0  # the reranker's score
    with pytest.raises(ValueError, match="--rerank reorders hybrid"):
        search(index.product, OFFICE, 3, runner, mode="vector", rerank=True)

    # unchanged inputs: the review stands, nothing is scored again
    scored = engines["good"].stats.pairs
    again = index.product.review(runner_for(runner)).companions[0]
    assert not again.evaluated and engines["good"].stats.pairs == scored


def test_a_reranker_no_better_than_hybrid_search_is_refused_and_search_says_why(
    workspace, runner, cross_encoder_folder, engines
):
    configure(workspace, f"    reranker: {{model: {cross_encoder_folder}, candidates: 10}}\n")
    index = partition(workspace)
    index.run("run-1", runner)
    companion = index.product.review(runner_for(runner)).companions[0]
    assert companion.decision == "refused"
    assert companion.reason.startswith("no better than hybrid search alone: mrr_at_10 ")
    with pytest.raises(RerankRefusedError) as refused:
        search(index.product, "password", 3, runner, rerank=True)
    assert "\n" not in str(refused.value)
    assert "not used: refused: no better than hybrid search alone" in str(refused.value)
    # without a reranker, --rerank says so
    configure(workspace, "")
    with pytest.raises(RerankRefusedError, match="has no reranker"):
        search(partition(workspace).product, "password", 3, runner, rerank=True)


def test_a_live_reranker_is_not_used_over_an_index_generation_it_was_not_reviewed_on(
    workspace, runner, cross_encoder_folder, engines
):
    good = cross_encoder_folder.rename(cross_encoder_folder.with_name("good-cross-encoder"))
    line = f"    reranker: {{model: {good}, candidates: 10}}\n"
    configure(workspace, line)
    first = partition(workspace)
    first.run("run-1", runner)
    assert first.product.review(runner_for(runner)).companions[0].decision == "promoted"
    reranker_generation = first.product.reranking.index

    configure(workspace, line, chunking="    chunking: {max_tokens: 64, overlap_tokens: 8}\n")
    second = partition(workspace)
    second.run("run-2", lambda: runner_for(runner)(second.model))
    review = second.product.review(runner_for(runner))
    assert review.decision == "promoted"  # tolerance 1.0: the new index generation is live
    # the reranker reorders the new live generation only once reviewed on it
    (companion,) = review.companions
    assert companion.generation != reranker_generation
    assert companion.decision == "promoted"
    registry = second.product.registry
    old = registry.get("handbook_reranker", reranker_generation.rpartition("__")[2])
    assert old.state == "retired"
    assert search(second.product, OFFICE, 1, runner, rerank=True)[0].doc_id == "refunds.md"


def test_a_live_reranker_reviewed_on_a_retired_index_generation_is_refused(
    workspace, runner, cross_encoder_folder, engines
):
    good = cross_encoder_folder.rename(cross_encoder_folder.with_name("good-cross-encoder"))
    line = f"    reranker: {{model: {good}, candidates: 10}}\n"
    configure(workspace, line)
    first = partition(workspace)
    first.run("run-1", runner)
    first.product.review(runner_for(runner))
    configure(workspace, line, chunking="    chunking: {max_tokens: 64, overlap_tokens: 8}\n")
    second = partition(workspace)
    second.run("run-2", lambda: runner_for(runner)(second.model))
    second.product.registry.promote("handbook", second.product.fingerprint, "by hand", "test")
    with pytest.raises(RerankRefusedError, match="no longer live; the collection's next run"):
        search(second.product, "password", 3, runner, rerank=True)
