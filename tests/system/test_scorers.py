"""One set of pairs, two engines: the TEST cross-encoder (all-MiniLM-L6-v2's encoder under an
untrained one-label head) scores the same (query, document) pairs in the run's process
(sentence-transformers' `CrossEncoder`) and on vLLM's engine in that process (`LLM.score`,
the folder as a pooling model), on this CPU: the same scores within 1e-3 and the same order,
a pair past the model's 512 tokens included."""

import numpy as np
import pytest

from batch_pipeline.inference.rerankers import build_test_cross_encoder, resolve_reranker
from batch_pipeline.inference.scorer import CrossEncoderScorer
from batch_pipeline.inference.vllm_scorer import VllmScorer
from tests.engine.test_scorers import DOCUMENTS, QUERY


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, model):
    return resolve_reranker(build_test_cross_encoder(model.path, tmp_path_factory.mktemp("ce")))


def test_in_process_and_vllm_give_the_same_scores_in_the_same_order(reranker):
    pairs = [(QUERY, document) for document in DOCUMENTS]
    pairs += [("invoices", document) for document in DOCUMENTS]
    local = CrossEncoderScorer(reranker).score(pairs)
    vllm = VllmScorer(reranker)
    on_vllm = vllm.score(pairs)
    assert np.abs(local - on_vllm).max() < 1e-3
    assert list(np.argsort(-local, kind="stable")) == list(np.argsort(-on_vllm, kind="stable"))
    assert vllm.stats.pairs == len(pairs) and vllm.load_seconds > 0


def test_the_shipped_chat_model_judges_pairs_in_process(chat_model_dir):
    """The yes/no judge on the shipped SmolLM2-135M-Instruct on vLLM in this process: one
    score in [0, 1] per pair, the model said something (not every score 0.5), and a rerun
    gives the same scores (greedy, one token)."""
    from batch_pipeline.inference.chat_models import resolve_chat_model
    from batch_pipeline.inference.judge import VllmJudge
    from batch_pipeline.inference.vllm_generator import VllmGenerator, engine_settings_for

    model = resolve_chat_model(chat_model_dir, chat_model_dir.parent)
    generator = VllmGenerator(model, engine_settings_for(model, "cpu", "float32"))
    judge = VllmJudge(generator)
    pairs = [(QUERY, document) for document in DOCUMENTS]
    try:
        first = judge.score(pairs)
        assert first.shape == (len(pairs),) and ((first >= 0) & (first <= 1)).all()
        assert np.abs(first - 0.5).max() > 0.01
        assert np.array_equal(judge.score(pairs), first)
        assert judge.stats.pairs == 2 * len(pairs) and judge.load_seconds > 0
    finally:
        generator.close()


def test_the_score_executors_score_one_plan_alike(reranker, tmp_path):
    """The registry's `local`, `vllm` and `vllm-run-batch` score executors over the same plan
    (two queries' pairs, one past the model's 512 tokens): the same score for every pair,
    within 1e-3, and so the same order."""
    from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
    from batch_pipeline.executors.scoring import score_executor
    from batch_pipeline.state.staging import read_table
    from tests.engine.test_scorers import write_pairs

    pairs = [(f"h{i}", QUERY, document) for i, document in enumerate(DOCUMENTS)]
    pairs += [(f"i{i}", "invoices", document) for i, document in enumerate(DOCUMENTS)]
    write_pairs(tmp_path / "pairs.parquet", pairs)
    found = {}
    for name in ("local", "vllm", "vllm-run-batch"):
        executor = score_executor(reranker, ExecutorChoice(name=name, device="cpu"))
        options = ExecuteOptions()
        executor.plan(tmp_path / "pairs.parquet", tmp_path / f"{name}-plan.parquet", options)
        summary = executor.execute(tmp_path / f"{name}-plan.parquet",
                                   tmp_path / f"{name}.parquet", None,
                                   tmp_path / f"{name}-checkpoints", options)  # fmt: skip
        assert summary.stats.pairs == len(pairs)
        table = read_table(tmp_path / f"{name}.parquet", ["input_hash", "score"]).to_pydict()
        found[name] = dict(zip(table["input_hash"], table["score"], strict=True))
    for name in ("vllm", "vllm-run-batch"):
        assert found[name].keys() == found["local"].keys()
        assert max(abs(found["local"][h] - found[name][h]) for h in found["local"]) < 1e-3, name
