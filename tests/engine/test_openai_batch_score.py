"""The score family's `openai-batch` executor: the yes/no judge on the shipped chat model's
tokenizer, its questions sent as chat completions with first-token log-probabilities to the
LOOPBACK EMULATOR of the OpenAI Batch API (whose judge reads the question's words in the
document). Each pair's score is P(yes) / (P(yes) + P(no)) of the emulator's answer; a refused
request is that pair's failure; a rerun while the batch is in flight submits nothing and
collects it once finished; a cross-encoder is refused in one line."""

import json

import numpy as np
import pyarrow as pa
import pytest

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.batch_api import BatchApiSettings, BatchLedger, with_ledger
from batch_pipeline.executors.scoring import score_executor
from batch_pipeline.inference.chat_models import resolve_chat_model
from batch_pipeline.inference.judge import ResolvedJudge, judge_probability
from batch_pipeline.inference.rerankers import resolve_reranker
from batch_pipeline.stages.score import PAIRS_SCHEMA
from batch_pipeline.state.staging import StageWriter, read_table
from batch_pipeline.state.tracking import TrackingStore
from tests.support import stand_in_cross_encoder
from tests.support.batch_api import overlap_judge

KEY_ENV = "BP_TEST_BATCH_API_KEY"
QUERY = "how do I reset my password"
DOCUMENTS = [
    "Use the Forgot password link on the sign-in page to reset your password.",
    "Invoices are sent on the first of each month.",
    "Single sign-on users reset their password with their identity provider.",
    "The office opens at nine.",
]
PAIRS = [(f"h{i}", QUERY, document) for i, document in enumerate(DOCUMENTS)]


@pytest.fixture()
def judge(chat_model_dir):
    return ResolvedJudge(resolve_chat_model(chat_model_dir, chat_model_dir.parent))


@pytest.fixture()
def planned(tmp_path, judge):
    """The pairs planned by the executor's plan (the judge's prompts counted)."""
    with StageWriter(tmp_path / "pairs.parquet", PAIRS_SCHEMA) as out:
        columns = {name: [p[i] for p in PAIRS] for i, name in enumerate(PAIRS_SCHEMA.names)}
        out.write_table(pa.table(columns, schema=PAIRS_SCHEMA))
    return tmp_path


def executor_at(batch_api, judge, tmp_path, wait: float | None = None):  # noqa: ANN001, ANN201
    api = BatchApiSettings(
        batch_api.url, KEY_ENV, poll_seconds=0.01, max_poll_seconds=0.02, wait_seconds=wait
    )
    executor = score_executor(judge, ExecutorChoice(name="openai-batch", batch_api=api))
    tracking = TrackingStore(f"sqlite:///{tmp_path / 'tracking.db'}")
    ledger = BatchLedger(tracking, "related__judge", "handbook")
    return with_ledger(executor, ledger)  # as the frame hands it a partition's


def run(executor, folder, run_id: str):  # noqa: ANN001, ANN201
    """Plan and execute into `folder/<run_id>/`, checkpointed under `folder/checkpoints`."""
    options = ExecuteOptions()
    out = folder / run_id
    out.mkdir(exist_ok=True)
    executor.plan(folder / "pairs.parquet", out / "plan.parquet", options)
    summary = executor.execute(
        out / "plan.parquet", out / "scores.parquet", None, folder / "checkpoints", options
    )
    table = read_table(out / "scores.parquet", ["input_hash", "score"]).to_pydict()
    return summary, dict(zip(table["input_hash"], table["score"], strict=True))


def expected_score(document: str) -> float:
    """The emulator's judge on the pair, as the executor cuts it (short: uncut)."""
    user = f"Question: {QUERY}\n\nDocument:\n{document}\n\nDoes ..."
    return judge_probability(overlap_judge([{"role": "user", "content": user}]))


def test_the_judge_s_scores_come_from_the_provider_s_first_token(
    planned, batch_api, judge, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)
    summary, scores = run(executor_at(batch_api, judge, planned), planned, "run-1")
    assert sorted(scores) == [h for h, _, _ in PAIRS]
    assert np.allclose(
        [scores[h] for h, _, _ in PAIRS], [expected_score(d) for _, _, d in PAIRS], atol=1e-6
    )
    assert scores["h0"] > 0.9 and scores["h1"] < 0.1  # the answer, and one that is not
    (lines,) = batch_api.created
    assert sorted(lines) == sorted(h for h, _, _ in PAIRS)  # custom_id: the pair's key
    request = json.loads(
        batch_api.files[next(iter(batch_api.batches.values())).input_file_id]
        .decode()
        .splitlines()[0]
    )["body"]
    assert (request["max_tokens"], request["logprobs"], request["top_logprobs"]) == (1, True, 20)
    assert summary.stats.pairs == len(PAIRS) and summary.batches.collected
    record = summary.record()  # the run is measured against the provider's window
    assert record["executor"] == "openai-batch" and record["window_seconds"] == 86400


def test_a_refused_pair_fails_and_a_batch_in_flight_is_collected_by_the_next_run(
    planned, batch_api, judge, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)
    batch_api.fail = lambda custom_id: 400 if custom_id == "h3" else None
    batch_api.hold = True  # a slow provider: the batch stays in progress
    first, scores = run(executor_at(batch_api, judge, planned, wait=0), planned, "run-1")
    assert scores == {} and first.unanswered == len(PAIRS) and first.batches.pending == 1
    again, _ = run(executor_at(batch_api, judge, planned, wait=0), planned, "run-2")
    assert len(batch_api.created) == 1 and again.batches.submitted == []  # nothing new sent
    batch_api.hold = False
    last, scores = run(executor_at(batch_api, judge, planned), planned, "run-3")
    assert sorted(scores) == ["h0", "h1", "h2"] and len(batch_api.created) == 1
    assert list(last.failed_inputs) == ["h3"] and "400" in last.failed_inputs["h3"]


def test_a_score_that_is_not_a_finite_number_fails_its_pair_alone_and_is_asked_again(
    planned, batch_api, judge, monkeypatch
):
    """A provider answering NaN log-probabilities for one pair: that pair's failure
    (`malformed answer`), never a checkpoint row; the rest land, and the next run asks it
    again (round six: the reranker's openai-batch path under the embedding path's cases)."""
    from batch_pipeline.state.checkpoints import unlandable_parts
    from batch_pipeline.state.staging import as_stage_path

    monkeypatch.setenv(KEY_ENV, batch_api.api_key)

    def poisoned(messages: list[dict]) -> list[tuple[str, float]]:
        if "Invoices" in messages[-1]["content"]:  # the pair h1
            return [("yes", float("nan")), ("no", float("nan"))]
        return overlap_judge(messages)

    batch_api.judge = poisoned
    first, scores = run(executor_at(batch_api, judge, planned), planned, "run-1")
    assert sorted(scores) == ["h0", "h2", "h3"]
    assert list(first.failed_inputs) == ["h1"]
    assert first.failed_inputs["h1"] == "malformed answer: score is not a finite number"
    assert unlandable_parts(as_stage_path(planned)) == {}  # no checkpoint holds it
    batch_api.judge = overlap_judge
    again, scores = run(executor_at(batch_api, judge, planned), planned, "run-2")
    assert "h1" in scores and not again.failed_inputs
    assert batch_api.created[-1] == ["h1"]  # only the refused pair was asked again


def test_a_cross_encoder_cannot_be_scored_through_a_batch_api(tmp_path):
    folder = stand_in_cross_encoder(tmp_path / "cross-encoder")
    api = BatchApiSettings("http://127.0.0.1:9/v1", KEY_ENV)
    with pytest.raises(ConfigError, match="executor: openai-batch scores pairs with the judge"):
        score_executor(resolve_reranker(folder), ExecutorChoice("openai-batch", batch_api=api))
