"""The `openai-batch` executor against the LOOPBACK EMULATOR of the OpenAI Batch API, through
the official `openai` client, planning with the FAKE generator: it lands the briefs the
in-process executor lands, whatever order the results come in; a partial failure is sent
again once with only its ids; an expired batch lands what completed and plans the rest
again; a rerun while a batch is in flight submits nothing and collects it when it finishes, and
the submitting and the collecting run are recorded as one run;
a crash between submit and land loses nothing; the key appears nowhere."""

from pathlib import Path

import pytest

from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.config import load_config
from batch_pipeline.executors import openai_batch
from batch_pipeline.executors.openai_batch import BatchApiSettings, ProviderBatchError
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.measures.run import RunMeasures
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import many_articles, write_briefs_config

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "BP_TEST_BATCH_API_KEY"
ARTICLES = [f"article-{i:02d}.md" for i in range(8)]


@pytest.fixture()
def corpus(tmp_path):
    many_articles(tmp_path / "docs", count=8)
    config = write_briefs_config(tmp_path, ", document_tokens: 40", glob=None)
    return config


def product_of(config: Path, home: Path, executor: str = "vllm", **api: object) -> BriefProduct:
    loaded = load_config(config)
    storage = resolve_storage(str(home))
    tracking = TrackingStore(storage.tracking_url)
    store = VectorStore(storage.lancedb_uri)
    documents = lambda key: IndexPartition(loaded, storage, key, tracking, store)  # noqa: E731
    settings = None
    if executor == openai_batch.NAME:
        values = {
            "api_key_env": KEY_ENV,
            "poll_seconds": 0.01,
            "max_poll_seconds": 0.02,
            "wait_seconds": None,
            **api,
        }
        settings = BatchApiSettings(**values)
    return BriefProduct(
        loaded,
        storage,
        "handbook",
        FakeGenerator(),
        documents,
        None,
        tracking,
        store,
        executor,
        settings,
    )


@pytest.fixture()
def provider(corpus, batch_api, tmp_path, monkeypatch):
    """The briefs on the openai-batch executor, at the emulator, with its key in the
    environment; `make(**settings)` opens it again (a new process would)."""
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)

    def make(**settings: object) -> BriefProduct:
        return product_of(
            corpus, tmp_path / "home", openai_batch.NAME, api_base=batch_api.url, **settings
        )

    return make


def run(product: BriefProduct, run_id: str) -> dict:
    return product.partition("handbook").run(run_id, lambda: product.generator)


def briefs(product: BriefProduct) -> dict[str, str]:
    return {r["doc_id"]: r["raw_output"] for r in product.briefs.rows(product.index)}


def test_it_lands_the_in_process_briefs_from_shuffled_results(
    corpus, provider, batch_api, tmp_path
):
    in_process = product_of(corpus, tmp_path / "in-process")
    run(in_process, "run-local")
    product = provider()
    assert product.index == in_process.index  # the same generation: same model, same plan
    landed = run(product, "run-1")
    assert sorted(briefs(product)) == ARTICLES
    assert briefs(product) == briefs(in_process)  # joined by custom_id, in any order
    assert landed["execute"].executor == "openai-batch"
    assert len(batch_api.created) == 1 and len(batch_api.created[0]) == 8
    (batch,) = product.tracking.provider_batches(product.index, "handbook")
    assert batch.collected_by == "run-1" and batch.status == "completed"
    run(product, "run-2")  # nothing stale: nothing submitted, nothing changed
    assert len(batch_api.created) == 1 and briefs(product) == briefs(in_process)


def test_a_partial_failure_is_sent_again_once_with_only_its_ids(provider, batch_api):
    product = provider()
    flaky: set[str] = set()

    def fail(custom_id: str) -> int | None:
        if len(flaky) < 3 and custom_id not in flaky:  # three requests fail, once each
            flaky.add(custom_id)
            return 500
        return None

    batch_api.fail = fail
    run(product, "run-1")
    assert [len(ids) for ids in batch_api.created] == [8, 3]
    assert sorted(batch_api.created[1]) == sorted(flaky)  # only the failed ids
    assert sorted(briefs(product)) == ARTICLES


def test_a_refused_request_is_its_document_s_failure_and_not_sent_again(provider, batch_api):
    product = provider()
    refused: list[str] = []
    batch_api.fail = lambda cid: (refused.append(cid) or 400) if not refused else None
    landed = run(product, "run-1")["land"]
    assert [len(ids) for ids in batch_api.created] == [8]  # a 400 says the request is bad
    assert len(briefs(product)) == 7 and len(landed.summary.failed) == 1
    assert "status 400" in next(iter(landed.summary.failed.values()))


def test_an_expired_batch_lands_what_completed_and_plans_the_rest_again(provider, batch_api):
    product = provider()
    batch_api.expire_after = 3  # each batch answers three requests before its window ends
    landed = run(product, "run-1")["land"]
    assert [len(ids) for ids in batch_api.created] == [8, 5]  # the expired five, once more
    assert len(briefs(product)) == 6 and landed.summary.failed == {}  # not failures: no answer yet
    assert product.tracking.failure_count(product.index) == 0
    batch_api.expire_after = None
    run(product, "run-2")  # the two left are planned again
    assert [len(ids) for ids in batch_api.created] == [8, 5, 2]
    assert sorted(briefs(product)) == ARTICLES


def test_a_rerun_while_a_batch_is_in_flight_submits_nothing_then_collects_it(provider, batch_api):
    product = provider(wait_seconds=0)  # submit and return, as a Dagster step does
    batch_api.hold = True  # the provider is slow today
    first = run(product, "run-1")
    assert first["execute"].pending_batches == 1 and briefs(product) == {}
    second = run(product, "run-2")
    assert len(batch_api.created) == 1  # in flight: nothing submitted again
    assert second["execute"].pending_batches == 1 and briefs(product) == {}
    batch_api.hold, batch_api.polls_to_finish = False, 1  # done by the next poll
    third = run(product, "run-3")
    assert len(batch_api.created) == 1 and third["execute"].pending_batches == 0
    assert sorted(briefs(product)) == ARTICLES
    (batch,) = product.tracking.provider_batches(product.index)
    assert (batch.run_id, batch.collected_by) == ("run-1", "run-3")


def test_the_submitting_and_the_collecting_run_are_recorded_as_one_run(provider, batch_api):
    product = provider(wait_seconds=0)  # the step submits and returns; a later run collects
    batch_api.hold = True
    run(product, "run-1")
    (submitting,) = product.tracking.runs_with_id("run-1")
    assert submitting["attempted"] == 0  # it landed nothing: its briefs are at the provider
    batch_api.hold, batch_api.polls_to_finish = False, 1
    run(product, "run-2")
    records = product.tracking.partition_runs(["handbook"], 10, product.index)
    assert [r["run_id"] for r in records] == ["run-2"]  # one run, not two
    (one,) = records
    assert one["submitted_by"] == "run-1"
    assert one["started_at"] == submitting["started_at"]  # its wall-clock spans the batch
    measures = RunMeasures.from_record(one)
    assert measures.submitted_by == "run-1" and measures.executor == "openai-batch"
    assert measures.attempted == len(ARTICLES) and measures.window_seconds == 86400
    assert product.tracking.runs_with_id("run-1") == []


def test_a_crash_between_submit_and_land_loses_nothing(provider, batch_api, monkeypatch):
    class Crash(BaseException):
        pass

    def crash(stage: str, mark: object) -> None:
        if stage == "submitted":
            raise Crash  # as a SIGKILL right after the batch id was recorded

    monkeypatch.setattr(openai_batch, "crash_point", crash)
    with pytest.raises(Crash):
        run(provider(), "run-1")
    monkeypatch.undo()
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)
    product = provider()  # a new process
    run(product, "run-2")
    assert len(batch_api.created) == 1  # the recorded batch was collected, not sent again
    assert sorted(briefs(product)) == ARTICLES


def test_the_key_appears_nowhere_and_a_refused_key_is_not_quoted(
    provider, batch_api, monkeypatch, tmp_path, capsys, caplog
):
    product = provider(price_per_million_input_tokens=0.075, price_per_million_output_tokens=0.30)
    summaries = run(product, "run-1")
    measures, stats = summaries["land"].measures, summaries["execute"].stats
    assert measures.executor == "openai-batch" and measures.window_seconds == 86400
    priced = (stats.prompt_tokens * 0.075 + stats.output_tokens * 0.30) / 1_000_000
    assert measures.token_cost == pytest.approx(priced) and priced > 0
    assert measures.execute_cost == measures.token_cost  # priced by tokens, not by the hour
    (stored,) = product.tracking.partition_runs(["handbook"], 1, product.index)
    assert stored["executor"] == "openai-batch" and stored["token_cost"] == pytest.approx(priced)
    key = batch_api.api_key
    said = capsys.readouterr()
    assert key not in said.out + said.err + caplog.text
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path

    wrong = "sk-wrong-key-abcdefghijklmnopqrstuvwxyz"
    monkeypatch.setenv(KEY_ENV, wrong)
    (tmp_path / "docs" / "article-00.md").write_text("# Changed\n\nNew words here.\n")
    with pytest.raises(ProviderBatchError) as refused:
        run(provider(), "run-2")
    message = str(refused.value)
    assert "401" in message and wrong not in message
    assert not any(wrong[i : i + 9] in message for i in range(len(wrong) - 8))
    assert batch_api.unauthorised >= 1


def test_no_key_in_the_environment_is_a_clear_error_naming_the_variable(provider, monkeypatch):
    from batch_pipeline.config import ConfigError

    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=f"\\${KEY_ENV}"):
        run(provider(), "run-1")
