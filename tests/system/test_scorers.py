"""One set of pairs, two engines: the TEST cross-encoder (all-MiniLM-L6-v2's encoder under an
untrained one-label head) scores the same (query, document) pairs in the run's process
(sentence-transformers' `CrossEncoder`) and on vLLM's engine in that process (`LLM.score`,
the folder as a pooling model), on this CPU: the same scores within 1e-3 and the same order,
a pair past the model's 512 tokens included."""

import numpy as np
import pyarrow as pa
import pytest

from batch_pipeline.inference.cross_encoder import CrossEncoderScorer
from batch_pipeline.inference.rerankers import build_test_cross_encoder, resolve_reranker
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


def test_the_shipped_chat_model_judges_pairs_in_process_and_through_the_batch_api(
    chat_model_dir, batch_api, tmp_path, monkeypatch
):
    """The yes/no judge on the shipped SmolLM2-135M-Instruct on vLLM in this process: one
    score in [0, 1] per pair, the model said something (not every score 0.5), and a rerun
    gives the same scores (greedy, one token; to within 1e-5). The same pairs through the
    `openai-batch` score executor, at the Batch API emulator answering with the same model's
    first-token log-probabilities: the same scores within 1e-4; and through `vllm-run-batch`
    (vLLM's own run-batch over chat completion lines): within 1e-3."""
    from vllm import SamplingParams

    from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
    from batch_pipeline.executors.batch_api import BatchApiSettings, BatchLedger, with_ledger
    from batch_pipeline.executors.scoring import score_executor
    from batch_pipeline.inference.chat_models import resolve_chat_model
    from batch_pipeline.inference.judge import TOP_LOGPROBS, ResolvedJudge, VllmJudge
    from batch_pipeline.inference.vllm_generator import VllmGenerator, engine_settings_for
    from batch_pipeline.stages.score import PAIRS_SCHEMA
    from batch_pipeline.state.staging import StageWriter, read_table
    from batch_pipeline.state.tracking import TrackingStore

    model = resolve_chat_model(chat_model_dir, chat_model_dir.parent)
    generator = VllmGenerator(model, engine_settings_for(model, "cpu", "float32"))
    judge = VllmJudge(generator)
    pairs = [(QUERY, document) for document in DOCUMENTS]

    def provider_judge(messages: list[dict]) -> list[tuple[str, float]]:
        params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS)
        (output,) = generator.engine().chat([messages], params, use_tqdm=False)
        first = output.outputs[0].logprobs[0]
        return [(str(lp.decoded_token), float(lp.logprob)) for lp in first.values()]

    try:
        first = judge.score(pairs)
        assert first.shape == (len(pairs),) and ((first >= 0) & (first <= 1)).all()
        assert np.abs(first - 0.5).max() > 0.01
        # greedy, one token: a rerun gives the same scores, to a few float32 ulps (a second
        # pass through the same engine, its prefix cache warm, may sum in another order: 4e-6
        # apart on a 2-core AMD EPYC Zen 4, identical on an AMX Xeon)
        np.testing.assert_allclose(judge.score(pairs), first, rtol=0, atol=1e-5)
        assert judge.stats.pairs == 2 * len(pairs) and judge.load_seconds > 0

        batch_api.judge = provider_judge
        monkeypatch.setenv("BP_TEST_BATCH_API_KEY", batch_api.api_key)
        with StageWriter(tmp_path / "pairs.parquet", PAIRS_SCHEMA) as out:
            keys = [f"h{i}" for i in range(len(pairs))]
            columns = {
                "input_hash": keys,
                "query": [q for q, _ in pairs],
                "document": [d for _, d in pairs],
            }
            out.write_table(pa.table(columns, schema=PAIRS_SCHEMA))
        api = BatchApiSettings(
            batch_api.url, "BP_TEST_BATCH_API_KEY", poll_seconds=0.01, wait_seconds=None
        )
        choice = ExecutorChoice(name="openai-batch", batch_api=api)
        ledger = BatchLedger(TrackingStore(f"sqlite:///{tmp_path / 't.db'}"), "g__j", "p")
        executor = with_ledger(score_executor(ResolvedJudge(model), choice), ledger)
        run = tmp_path / "run-1"
        run.mkdir()
        executor.plan(tmp_path / "pairs.parquet", run / "plan.parquet", ExecuteOptions())
        executor.execute(
            run / "plan.parquet",
            run / "scores.parquet",
            None,
            tmp_path / "checkpoints",
            ExecuteOptions(),
        )
        table = read_table(run / "scores.parquet", ["input_hash", "score"]).to_pydict()
        found = dict(zip(table["input_hash"], table["score"], strict=True))
        assert np.abs(np.array([found[key] for key in keys]) - first).max() < 1e-4
    finally:
        generator.close()

    # and through vLLM's own run-batch, chat completion lines with log-probabilities
    choice = ExecutorChoice(name="vllm-run-batch", device="cpu", dtype="float32")
    executor = score_executor(ResolvedJudge(model), choice)
    run = tmp_path / "run-2"
    run.mkdir()
    executor.plan(tmp_path / "pairs.parquet", run / "plan.parquet", ExecuteOptions())
    summary = executor.execute(
        run / "plan.parquet",
        run / "scores.parquet",
        None,
        tmp_path / "checkpoints-2",
        ExecuteOptions(),
    )
    table = read_table(run / "scores.parquet", ["input_hash", "score"]).to_pydict()
    found = dict(zip(table["input_hash"], table["score"], strict=True))
    assert np.abs(np.array([found[key] for key in keys]) - first).max() < 1e-3
    assert summary.backend == "vllm-run-batch" and summary.stats.pairs == len(pairs)


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
        summary = executor.execute(
            tmp_path / f"{name}-plan.parquet",
            tmp_path / f"{name}.parquet",
            None,
            tmp_path / f"{name}-checkpoints",
            options,
        )
        assert summary.stats.pairs == len(pairs)
        table = read_table(tmp_path / f"{name}.parquet", ["input_hash", "score"]).to_pydict()
        found[name] = dict(zip(table["input_hash"], table["score"], strict=True))
    for name in ("vllm", "vllm-run-batch"):
        assert found[name].keys() == found["local"].keys()
        assert max(abs(found["local"][h] - found[name][h]) for h in found["local"]) < 1e-3, name
