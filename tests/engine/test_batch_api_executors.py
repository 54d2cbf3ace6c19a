"""The Batch API executors: `openai-batch` for both model families, generate (the document
briefs) and embed (the vector index), and `anthropic-batch` for generate, against the
LOOPBACK EMULATOR of the OpenAI Batch API and Anthropic's Message Batches through each
official client (`openai`, `anthropic`); one body per behaviour, run for each: each lands the
in-process executor lands, whatever order the results come in; a partial failure is sent
again once with only its ids; a refused request is its document's failure; an expired batch
lands what completed and plans the rest again (not failures); a rerun while a batch is in
flight submits nothing and collects it when it finishes, and the submitting and the
collecting run are recorded as one run; a crash between submit and land loses nothing; the
key appears nowhere. The briefs plan with the FAKE generator; the index embeds with the real
all-MiniLM-L6-v2, which the emulator runs on the token ids it is sent."""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import sqlalchemy as sa

from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.executors import ExecutorChoice, batch_driver
from batch_pipeline.executors.anthropic_batch import NAME as ANTHROPIC
from batch_pipeline.executors.batch_api import NAME, BatchApiSettings, ProviderBatchError
from batch_pipeline.index.product import open_partition
from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.measures.run import RunMeasures
from batch_pipeline.runs.partition import StagedPartition
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore, schema
from batch_pipeline.state.vector_store import VectorStore
from tests.support import many_articles, write_briefs_config

KEY_ENV = "BP_TEST_BATCH_API_KEY"
ARTICLES = [f"article-{i:02d}.md" for i in range(8)]
# a test's id -> the model family and the Batch API executor it runs on
SUBJECTS = {
    "generate": ("generate", NAME),
    "embed": ("embed", NAME),
    "anthropic": ("generate", ANTHROPIC),
}
OPENAI = [SUBJECTS["generate"], SUBJECTS["embed"]]  # a behaviour of the OpenAI Batch API's own
EMBED = [SUBJECTS["embed"]]


@pytest.fixture()
def corpus(tmp_path):
    many_articles(tmp_path / "docs", count=8)
    return write_briefs_config(tmp_path, ", document_tokens: 40", glob=None)


def api_settings(**api: object) -> BatchApiSettings:
    values = {
        "api_key_env": KEY_ENV,
        "poll_seconds": 0.01,
        "max_poll_seconds": 0.02,
        "wait_seconds": None,
        **api,
    }
    return BatchApiSettings(**values)


@dataclass
class Subject:
    """One family's product at a home, on an executor: its partition, how it runs, what it
    has landed by document, and the failures a land counted."""

    family: str
    partition: StagedPartition
    load: Callable[[], object]

    @property
    def tracking(self) -> TrackingStore:
        return self.partition.tracking

    @property
    def index(self) -> str:
        return self.partition.index

    def run(self, run_id: str) -> dict:
        return self.partition.run(run_id, self.load)

    def landed(self) -> dict[str, object]:
        """Each landed document's output: its brief, or its chunks' vectors by chunk id."""
        if self.family == "generate":
            product = self.partition.product
            return {r["doc_id"]: r["raw_output"] for r in product.briefs.rows(product.index)}
        table = self.partition.store.open(self.index)
        rows = table.to_arrow().to_pylist() if table is not None else []
        found: dict[str, dict] = {}
        for row in rows:
            found.setdefault(row["doc_id"], {})[row["chunk_id"]] = np.asarray(row["vector"])
        return found

    @staticmethod
    def failed(land) -> dict[str, str]:  # noqa: ANN001 - the land's Landing
        """The documents a land failed, with their reasons."""
        summary = land.summary
        if hasattr(summary, "failed"):
            return dict(summary.failed)
        return {f.doc_id: f.message for f in summary.failures}


def same_outputs(family: str, ours: dict, theirs: dict) -> bool:
    """The same briefs, or every chunk's vector within cosine 0.9999 of the other's."""
    if family == "generate" or ours.keys() != theirs.keys():
        return ours == theirs
    for doc_id, chunks in ours.items():
        if chunks.keys() != theirs[doc_id].keys():
            return False
        for chunk_id, vector in chunks.items():
            other = theirs[doc_id][chunk_id]
            if float(vector @ other / np.linalg.norm(vector) / np.linalg.norm(other)) < 0.9999:
                return False
    return True


def engine(runner):  # noqa: ANN001, ANN201
    """The real model on the token ids the emulator is sent: its `/v1/embeddings`."""

    def embed(given: list[int]) -> list[float]:
        ((_, vectors),) = list(runner.run([([0], [""], [given])]))
        return vectors[0].tolist()

    return embed


@pytest.fixture(params=list(SUBJECTS.values()), ids=list(SUBJECTS))
def subject_kind(request):
    """(model family, Batch API executor) of the test's subject."""
    return request.param


@pytest.fixture()
def family(subject_kind):
    return subject_kind[0]


@pytest.fixture()
def executor(subject_kind):
    return subject_kind[1]


def address(emulator, executor: str) -> str:  # noqa: ANN001
    """Where the executor's client finds the emulator: the OpenAI Batch API's base URL ends
    in /v1; Anthropic's client adds /v1 itself."""
    return emulator.base if executor == ANTHROPIC else emulator.url


@pytest.fixture()
def make(family, corpus, tmp_path, runner):
    """`make(executor, home, **api)`: the family's product at `home`, opened afresh (as a new
    process would), on the in-process executor (None) or a Batch API one."""

    def build(executor: str | None = None, home: str = "home", **api: object) -> Subject:
        loaded = load_config(corpus)
        storage = resolve_storage(str(tmp_path / home))
        tracking = TrackingStore(storage.tracking_url)
        store = VectorStore(storage.lancedb_uri)
        settings = api_settings(**api) if executor is not None else None
        choice = ExecutorChoice(name=executor, batch_api=settings)
        if family == "embed":
            partition = open_partition(
                loaded, storage, "handbook", tracking, store, execution=choice
            )
            return Subject(family, partition, lambda: runner)
        documents = lambda key: open_partition(loaded, storage, key, tracking, store)  # noqa: E731
        product = BriefProduct(
            loaded, storage, "handbook", FakeGenerator(), documents, None, tracking, store, choice
        )
        return Subject(family, product.partition("handbook"), lambda: product.generator)

    return build


@pytest.fixture()
def provider(make, batch_api, monkeypatch, runner, executor):
    """The family's product on its Batch API executor, at the emulator (whose embeddings
    are the real model's), with its key in the environment; `provider(**settings)` opens it
    again (a new process would)."""
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)
    batch_api.embed = engine(runner)
    return lambda **settings: make(executor, api_base=address(batch_api, executor), **settings)


def test_it_lands_the_in_process_outputs_from_shuffled_results(
    make, provider, batch_api, family, executor
):
    in_process = make(home="in-process")
    in_process.run("run-local")
    subject = provider()
    assert subject.index == in_process.index  # the same generation: same model, same plan
    landed = subject.run("run-1")
    assert sorted(subject.landed()) == ARTICLES
    assert same_outputs(family, subject.landed(), in_process.landed())  # joined by custom_id
    assert landed["land"].measures.executor == executor
    assert len(batch_api.created) == 1 and len(batch_api.created[0]) >= len(ARTICLES)
    (batch,) = subject.tracking.provider_batches(subject.index, "handbook")
    assert batch.collected_by == "run-1" and batch.status == "completed"
    subject.run("run-2")  # nothing stale: nothing submitted, nothing changed
    assert len(batch_api.created) == 1 and same_outputs(
        family, subject.landed(), in_process.landed()
    )


def test_newlines_and_control_characters_cross_the_batch_file_intact(
    make, provider, batch_api, family, tmp_path
):
    """A document with CRLF and bare CR line ends, tabs, a form feed, terminal escapes
    and Unicode line and paragraph separators: its requests are one JSON line each, and
    what lands is what the in-process executor lands (the provider's file read back line by
    line, not split at U+2028)."""
    words = "More words to embed and brief. " * 20
    odd = (
        "# Odd bytes\r\n\r\nFirst line\r\nsecond\rthird\tcolumn\x0cpage \x1b[31mred\x1b[0m "
        f"a line\u2028separator and a paragraph\u2029separator.\n\n{words}"
    )
    (tmp_path / "docs" / "odd.md").write_bytes(odd.encode("utf-8"))
    in_process = make(home="in-process")
    in_process.run("run-local")
    assert "odd.md" in in_process.landed()
    subject = provider()
    subject.run("run-1")
    assert sorted(subject.landed()) == sorted(in_process.landed())
    assert same_outputs(family, subject.landed(), in_process.landed())
    for lines in batch_api.created:  # one request per line, every id a request's
        assert len(lines) == len(set(lines))


def test_a_partial_failure_is_sent_again_once_with_only_its_ids(provider, batch_api):
    subject = provider()
    flaky: set[str] = set()

    def fail(custom_id: str) -> int | None:
        if len(flaky) < 3 and custom_id not in flaky:  # three requests fail, once each
            flaky.add(custom_id)
            return 500
        return None

    batch_api.fail = fail
    subject.run("run-1")
    assert [len(ids) for ids in batch_api.created[1:]] == [3]
    assert sorted(batch_api.created[1]) == sorted(flaky)  # only the failed ids
    assert sorted(subject.landed()) == ARTICLES


def test_a_refused_request_is_its_document_s_failure_and_not_sent_again(
    provider, batch_api, executor
):
    subject = provider()
    refused: list[str] = []
    batch_api.fail = lambda cid: (refused.append(cid) or 400) if not refused else None
    landed = subject.run("run-1")["land"]
    assert len(batch_api.created) == 1  # a 400 says the request is bad: not sent again
    failed = Subject.failed(landed)
    assert len(subject.landed()) == 7 and len(failed) == 1
    said = "invalid_request_error" if executor == ANTHROPIC else "status 400"
    assert said in next(iter(failed.values()))
    assert subject.tracking.failure_count(subject.index) == 1


def test_an_expired_batch_lands_what_completed_and_plans_the_rest_again(provider, batch_api):
    subject = provider()
    batch_api.expire_after = 3  # each batch answers three requests before its window ends
    landed = subject.run("run-1")["land"]
    first = len(batch_api.created[0])
    assert [len(ids) for ids in batch_api.created] == [first, first - 3]  # the expired, again
    assert len(subject.landed()) < len(ARTICLES)  # a document waits for all its answers
    assert Subject.failed(landed) == {}  # not failures: no answer yet
    assert subject.tracking.failure_count(subject.index) == 0
    batch_api.expire_after = None
    subject.run("run-2")  # only what is still unanswered is sent: answers are kept
    assert [len(ids) for ids in batch_api.created] == [first, first - 3, first - 6]
    assert sorted(subject.landed()) == ARTICLES


def test_a_rerun_while_a_batch_is_in_flight_submits_nothing_then_collects_it(provider, batch_api):
    subject = provider(wait_seconds=0)  # submit and return, as a Dagster step does
    batch_api.hold = True  # the provider is slow today
    first = subject.run("run-1")
    assert first["execute"].batches.pending == 1 and subject.landed() == {}
    assert subject.tracking.failure_count(subject.index) == 0  # waiting is not failing
    second = subject.run("run-2")
    assert len(batch_api.created) == 1  # in flight: nothing submitted again
    assert second["execute"].batches.pending == 1 and subject.landed() == {}
    batch_api.hold, batch_api.polls_to_finish = False, 1  # done by the next poll
    third = subject.run("run-3")
    assert len(batch_api.created) == 1 and third["execute"].batches.pending == 0
    assert sorted(subject.landed()) == ARTICLES
    (batch,) = subject.tracking.provider_batches(subject.index)
    assert (batch.run_id, batch.collected_by) == ("run-1", "run-3")


def test_the_submitting_and_the_collecting_run_are_recorded_as_one_run(
    provider, batch_api, executor
):
    subject = provider(wait_seconds=0)  # the step submits and returns; a later run collects
    batch_api.hold = True
    subject.run("run-1")
    (submitting,) = subject.tracking.runs_with_id("run-1")
    assert submitting["attempted"] == 0  # it landed nothing: its outputs are at the provider
    batch_api.hold, batch_api.polls_to_finish = False, 1
    subject.run("run-2")
    records = subject.tracking.partition_runs(["handbook"], 10, subject.index)
    assert [r["run_id"] for r in records] == ["run-2"]  # one run, not two
    (one,) = records
    assert one["submitted_by"] == "run-1"
    assert one["started_at"] == submitting["started_at"]  # its wall-clock spans the batch
    measures = RunMeasures.from_record(one)
    assert measures.submitted_by == "run-1" and measures.executor == executor
    assert measures.attempted == len(ARTICLES) and measures.window_seconds == 86400
    assert subject.tracking.runs_with_id("run-1") == []


def test_a_crash_between_submit_and_land_loses_nothing(provider, batch_api, monkeypatch):
    class Crash(BaseException):
        pass

    def crash(stage: str, mark: object) -> None:
        if stage == "submitted":
            raise Crash  # as a SIGKILL right after the batch id was recorded

    monkeypatch.setattr(batch_driver, "crash_point", crash)
    with pytest.raises(Crash):
        provider().run("run-1")
    monkeypatch.undo()
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)
    subject = provider()  # a new process
    subject.run("run-2")
    assert len(batch_api.created) == 1  # the recorded batch was collected, not sent again
    assert sorted(subject.landed()) == ARTICLES


def test_the_key_appears_nowhere_and_a_refused_key_is_not_quoted(
    provider, batch_api, monkeypatch, tmp_path, capsys, caplog, family, executor
):
    subject = provider(price_per_million_input_tokens=0.075, price_per_million_output_tokens=0.30)
    summaries = subject.run("run-1")
    measures, stats = summaries["land"].measures, summaries["execute"].stats
    assert measures.executor == executor and measures.window_seconds == 86400
    if family == "generate":
        priced = (stats.prompt_tokens * 0.075 + stats.output_tokens * 0.30) / 1_000_000
    else:  # an embedding has input tokens only
        priced = stats.tokens * 0.075 / 1_000_000
    assert measures.token_cost == pytest.approx(priced) and priced > 0
    assert measures.execute_cost == measures.token_cost  # priced by tokens, not by the hour
    (stored,) = subject.tracking.partition_runs(["handbook"], 1, subject.index)
    assert stored["executor"] == executor and stored["token_cost"] == pytest.approx(priced)
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
        provider().run("run-2")
    message = str(refused.value)
    assert "401" in message and wrong not in message
    assert not any(wrong[i : i + 9] in message for i in range(len(wrong) - 8))
    assert batch_api.unauthorised >= 1


def test_no_key_in_the_environment_is_a_clear_error_naming_the_variable(provider, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=f"\\${KEY_ENV}"):
        provider().run("run-1")


# ---------------------------------------------------------------- a hostile provider (round 5)


def test_an_unreadable_answer_line_fails_its_request_alone_and_the_rest_land(provider, batch_api):
    subject = provider()
    garbled: list[str] = []
    batch_api.garble = lambda cid: not garbled and not garbled.append(cid)  # the first answer
    batch_api.junk_lines = ["<html><body>502 Bad Gateway</body></html>"]  # names no request
    summaries = subject.run("run-1")
    batches = summaries["execute"].batches
    assert batches.unreadable_lines == 2 and batches.pending == 0
    (batch,) = subject.tracking.provider_batches(subject.index, "handbook")
    assert batch.collected_by == "run-1" and "2 unreadable lines" in batch.note  # not stuck
    failed = Subject.failed(summaries["land"])
    assert len(failed) == 1 and "not JSON" in next(iter(failed.values()))
    assert len(subject.landed()) == len(ARTICLES) - 1  # the rest landed
    assert any(
        "2 answer line(s) from the provider could not be read" in line
        for line in batches.lines("documents")
    )
    batch_api.garble = lambda cid: False
    subject.run("run-2")  # the next run sends the failed document's inputs again, only them
    assert set(garbled) <= set(batch_api.created[1])
    assert len(batch_api.created[1]) < len(batch_api.created[0]) / 2
    assert sorted(subject.landed()) == ARTICLES


@pytest.mark.parametrize("gone", ["batch", "output file", "input file"])
def test_a_batch_the_provider_no_longer_has_is_given_up_and_sent_again(
    provider, batch_api, gone, executor
):
    if gone == "input file" and executor == ANTHROPIC:
        pytest.skip("a Message Batch has its requests in its creation, not in an input file")
    subject = provider(wait_seconds=0)
    batch_api.hold = True
    subject.run("run-1")
    (remote,) = batch_api.batches.values()
    if gone == "output file":
        batch_api.hold, batch_api.polls_to_finish = False, 1
        batch_api._finish(remote)
        batch_api.forget(remote.output_file_id)
    else:
        batch_api.forget(remote.id if gone == "batch" else remote.input_file_id)
        batch_api.hold, batch_api.polls_to_finish = False, 1
    again = provider()  # waits until done
    summaries = again.run("run-2")
    assert sorted(again.landed()) == ARTICLES
    batches = summaries["execute"].batches
    if gone == "input file":  # the request ids were recorded: the provider's copy is not read
        assert batches.given_up == [] and len(batch_api.created) == 1
        return
    assert batches.given_up == [remote.id] and len(batch_api.created) == 2
    assert sorted(batch_api.created[1]) == sorted(batch_api.created[0])  # every request again
    recorded = again.tracking.provider_batch(remote.id)
    assert recorded.status == "given_up"
    assert recorded.note in (
        "the provider has no such batch (404)",
        "its output file is gone at the provider",
        "its results file is gone at the provider",  # a Message Batch's
    )
    assert again.tracking.uncollected_provider_batches() == []
    assert any("given up" in line for line in batches.lines("documents"))


def test_a_creation_answered_with_an_error_is_adopted_and_paid_once(provider, batch_api):
    subject = provider()
    batch_api.create_errors = 1  # the gateway timed out after the provider made the batch
    summaries = subject.run("run-1")
    assert len(batch_api.created) == 1  # no second batch: the client did not retry blindly
    (only,) = batch_api.batches
    assert summaries["execute"].batches.adopted == [only]
    charged = [cid for ids in batch_api.created for cid in ids]
    assert len(charged) == len(set(charged))  # one charge per request
    assert sorted(subject.landed()) == ARTICLES


def test_a_run_cut_off_while_creating_a_batch_adopts_it_on_the_rerun(
    provider, batch_api, monkeypatch
):
    class Crash(BaseException):
        pass

    def killed(*args: object) -> None:
        raise Crash  # as a SIGKILL while the creation was in flight

    batch_api.create_errors = 1  # the creation never answers the client
    monkeypatch.setattr(batch_driver.BatchDriver, "_adopt", killed)
    with pytest.raises(Crash):
        provider().run("run-1")
    monkeypatch.undo()
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)
    (intent,) = provider().tracking.uncollected_provider_batches()
    assert intent.creating and intent.status == "creating"  # recorded before the call
    subject = provider()  # a new process
    summaries = subject.run("run-2")
    assert len(batch_api.created) == 1  # adopted, not created again
    assert summaries["execute"].batches.adopted == list(batch_api.batches)
    assert sorted(subject.landed()) == ARTICLES


def test_a_batch_cancelled_at_the_provider_stops_the_run_from_sending(provider, batch_api):
    subject = provider(wait_seconds=0)
    batch_api.hold = True
    subject.run("run-1")
    (remote,) = batch_api.batches.values()
    remote.status = "cancelled"  # the operator cancelled it in the provider's console
    summaries = subject.run("run-2")
    assert len(batch_api.created) == 1  # cancelled means stop: nothing sent again at once
    assert summaries["execute"].batches.cancelled == [remote.id]
    assert any(
        "cancelled at the provider" in line
        for line in summaries["execute"].batches.lines("documents")
    )
    batch_api.hold, batch_api.polls_to_finish = False, 1
    provider().run("run-3")  # the next run sends what is still unanswered
    assert len(batch_api.created) == 2 and sorted(subject.landed()) == ARTICLES


@pytest.mark.parametrize("subject_kind", OPENAI)
def test_a_file_the_provider_refuses_fails_the_run_in_one_line_naming_its_lines(
    provider, batch_api
):
    subject = provider()
    batch_api.invalid = [
        {"code": "model_not_found", "message": f"no model 'm' (line {n})", "line": n}
        for n in range(1, 6)
    ]
    with pytest.raises(ProviderBatchError) as refused:
        subject.run("run-1")
    said = str(refused.value)
    assert "\n" not in said and said.startswith("provider batch batch_")
    assert "failed: model_not_found (line 1): no model 'm' (line 1); " in said
    assert said.endswith("; and 2 more")  # three named, the count of the rest
    # the errors named 5 lines of a longer file (a provider lists a few): those 5 were taken
    # as refused requests and the rest sent again once, whose refusal failed the run
    first, resent = batch_api.created
    assert len(first) > 5 and sorted(resent) == sorted(first[5:])
    batch_api.invalid = []  # the operator fixed the model's name
    provider().run("run-2")  # what the refused batches ran: nothing; the rest is sent again
    # the 5 taken as refused are recorded failures (a brief's), which the next run tries again
    provider().run("run-3")
    assert len(batch_api.created) <= 4 and sorted(subject.landed()) == ARTICLES


def test_requests_the_provider_refuses_fail_alone_and_the_rest_of_their_batch_lands(
    provider, batch_api, executor
):
    """A provider's validation refuses one request of the file (over its size limit, say).
    On the OpenAI Batch API the batch fails at once, naming that line, and the rest are sent
    again at once; Anthropic validates each request on its own, and the rest of the batch
    runs. Either way the request is its input's failure and the rest land, so one bad request
    never blocks the partition."""
    subject = provider()
    refused: list[str] = []
    batch_api.refuse = lambda cid: (
        "request too large" if (not refused and not refused.append(cid)) or cid in refused else None
    )
    summaries = subject.run("run-1")
    batches = summaries["execute"].batches
    first = batch_api.created[0]
    failed = Subject.failed(summaries["land"])
    assert len(failed) == 1 and "request too large" in next(iter(failed.values()))
    assert len(subject.landed()) == len(ARTICLES) - 1  # the rest landed
    recorded = {b.batch_id: b for b in subject.tracking.provider_batches(subject.index, "handbook")}
    assert all(b.collected_by == "run-1" for b in recorded.values())  # nothing left in flight
    assert batches.pending == 0
    if executor == NAME:  # the batch failed naming the line; the rest went again at once
        (resent,) = batch_api.created[1:]
        assert refused[0] in first and sorted(resent) == sorted(set(first) - set(refused))
        assert batches.refused_requests == 1
        assert "refused by the provider" in next(iter(failed.values()))
        assert any("1 of" in (b.note or "") and "refused" in b.note for b in recorded.values())
        assert any(
            "1 request(s) refused by the provider's validation" in line
            for line in batches.lines("documents")
        )
    else:  # the request errored alone, the rest of its batch ran
        assert len(batch_api.created) == 1 and refused[0] in first
        assert "invalid_request_error" in next(iter(failed.values()))
    sent = len(batch_api.created)
    batch_api.refuse = lambda cid: None  # the document was fixed, or the provider's limit
    subject.run("run-2")  # the next run sends the refused input again, only it
    assert len(batch_api.created) == sent + 1 and set(batch_api.created[-1]) <= set(first)
    assert sorted(subject.landed()) == ARTICLES


def test_status_doctor_and_batches_name_a_stuck_batch_and_drop_gives_it_up(
    provider, batch_api, corpus, tmp_path, capsys, executor
):
    from batch_pipeline import cli

    subject = provider(wait_seconds=0)
    batch_api.hold = True
    subject.run("run-1")
    (remote,) = batch_api.batches.values()
    args = ["--config", str(corpus), "--home", str(tmp_path / "home")]
    capsys.readouterr()
    assert cli.main([*args, "status"]) == 0
    said = capsys.readouterr().out
    assert "provider batches: 1 in flight" in said and "0 stuck" in said
    with subject.tracking.engine.begin() as conn:  # a day and more later, still running
        conn.execute(sa.update(schema.provider_batches).values(submitted_at=time.time() - 90000))
    assert cli.main([*args, "doctor"]) == 1
    said = capsys.readouterr().out
    assert f"provider batch {remote.id}" in said and "stuck: past its completion window" in said
    assert cli.main([*args, "batches", "drop", remote.id]) == 1  # confirmation first
    assert "would give up" in capsys.readouterr().out
    assert subject.tracking.provider_batch(remote.id).collected_at is None
    drop = [
        *args,
        "batches",
        "drop",
        remote.id,
        "--yes",
        "--api-base",
        address(batch_api, executor),
        "--api-key-env",
        KEY_ENV,
    ]
    assert cli.main(drop) == 0
    assert "cancelled at the provider" in capsys.readouterr().out
    assert batch_api.batches[remote.id].status == "cancelled"  # not billed on
    assert cli.main([*args, "batches", "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["batch_id"], shown["status"], shown["in_flight"]) == (remote.id, "dropped", False)
    batch_api.hold, batch_api.polls_to_finish = False, 1
    provider().run("run-2")  # the next run sends its requests again
    assert len(batch_api.created) == 2 and sorted(subject.landed()) == ARTICLES
    cli.main([*args, "doctor"])
    assert "provider batch" not in capsys.readouterr().out  # nothing stuck any more


def test_a_batch_given_up_after_api_base_changed_says_where_it_may_still_bill_and_is_cancelled_there(  # noqa: E501
    provider, make, batch_api, corpus, tmp_path, capsys, executor
):
    """A batch in flight at one Batch API, then a run at another (`--api-base` changed): the
    new one has no such batch, so it is given up and its requests sent there; the record,
    the run and `batches` name the first address, and `batches drop ID --api-base FIRST
    --yes` cancels it there, so it is not billed twice."""
    import itertools

    from batch_pipeline import cli
    from tests.support.batch_api import BatchApiEmulator

    subject = provider(wait_seconds=0)
    batch_api.hold = True
    subject.run("run-1")
    (remote,) = batch_api.batches.values()
    first = address(batch_api, executor)
    assert subject.tracking.provider_batch(remote.id).api_base == first
    other = BatchApiEmulator(api_key=batch_api.api_key)
    other._ids = itertools.count(1000)  # a provider's ids are its own
    other.embed, other.polls_to_finish = batch_api.embed, 1
    other.start()
    url = address(other, executor)
    try:
        moved = make(executor, api_base=url)
        summaries = moved.run("run-2")
        assert sorted(moved.landed()) == ARTICLES  # sent again at the new address
        batches = summaries["execute"].batches
        assert batches.given_up == batches.elsewhere == [remote.id]
        recorded = moved.tracking.provider_batch(remote.id)
        assert recorded.status == "given_up" and f"sent to {first}" in recorded.note
        assert any(
            "had been sent to another api_base" in line for line in batches.lines("documents")
        )
        args = ["--config", str(corpus), "--home", str(tmp_path / "home")]
        capsys.readouterr()
        assert cli.main([*args, "batches"]) == 0
        assert f"sent to {first}" in capsys.readouterr().out
        assert cli.main([*args, "batches", "drop", remote.id]) == 2  # where? it says
        assert first in capsys.readouterr().err
        drop = [
            *args,
            "batches",
            "drop",
            remote.id,
            "--api-base",
            first,
            "--api-key-env",
            KEY_ENV,
        ]
        assert cli.main(drop) == 1 and "would cancel" in capsys.readouterr().out
        assert batch_api.batches[remote.id].status not in ("cancelled", "cancelling")
        assert cli.main([*drop, "--yes"]) == 0
        assert "cancelled" in capsys.readouterr().out
        assert batch_api.batches[remote.id].status == "cancelled"  # not billed on
        assert (
            cli.main(
                [
                    *args,
                    "batches",
                    "drop",
                    remote.id,
                    "--yes",
                    "--api-base",
                    url,
                    "--api-key-env",
                    KEY_ENV,
                ]
            )
            == 2
        )
        assert "has no batch" in capsys.readouterr().err  # the wrong address: nothing there
    finally:
        other.stop()


def poisoned_once(healthy, poison):  # noqa: ANN001, ANN201
    """The emulator's `/v1/embeddings`, with the first input's vector poisoned; `.hit` holds
    that input."""

    def embed(given):  # noqa: ANN001, ANN202
        vector = healthy(given)
        if embed.hit is None:
            embed.hit = given
            return poison(vector)
        return vector

    embed.hit = None
    return embed


POISONS = {
    "nan": lambda v: [float("nan"), *v[1:]],
    "overflows float32": lambda v: [1e300, *v[1:]],  # inf, then NaN through normalising
    "another width": lambda v: [*v, *v[:128]],
}


@pytest.mark.parametrize("subject_kind", EMBED, ids=["embed"])
@pytest.mark.parametrize("poison", POISONS, ids=list(POISONS))
def test_a_provider_vector_that_is_not_finite_or_of_another_width_is_refused_and_sent_again(
    provider, batch_api, family, poison
):
    """Not written to a checkpoint, listed as its document's failure, the rest landed; the
    next run, against a healthy provider, lands the refused input (round six, defect 1)."""
    from batch_pipeline.state.checkpoints import unlandable_parts

    subject = provider()
    healthy = batch_api.embed
    batch_api.embed = poisoned_once(healthy, POISONS[poison])
    landed = subject.run("run-1")["land"]
    failed = Subject.failed(landed)
    assert len(failed) == 1 and "malformed answer" in next(iter(failed.values()))
    assert len(subject.landed()) == len(ARTICLES) - 1  # the rest landed
    staging = subject.partition.staging.root
    assert unlandable_parts(staging) == {}  # nothing a table cannot hold was kept
    batch_api.embed = healthy
    subject.run("run-2")
    assert sorted(subject.landed()) == ARTICLES
    assert subject.tracking.failure_count(subject.index) == 0


@pytest.mark.parametrize("subject_kind", EMBED, ids=["embed"])
def test_a_provider_whose_every_vector_has_another_width_fails_each_input_by_name(
    provider, batch_api, family
):
    subject = provider()
    healthy = batch_api.embed
    batch_api.embed = lambda given: [*healthy(given), 0.0]
    landed = subject.run("run-1")["land"]
    failed = Subject.failed(landed)
    assert len(failed) == len(ARTICLES) and not subject.landed()
    reason = next(iter(failed.values()))
    assert "malformed answer: a vector of 385 values" in reason and "embeds into 384" in reason
    assert not subject.tracking.provider_batches(subject.index, "handbook", uncollected=True)
    batch_api.embed = healthy
    subject.run("run-2")
    assert sorted(subject.landed()) == ARTICLES


@pytest.mark.parametrize("subject_kind", EMBED, ids=["embed"])
def test_a_checkpoint_that_cannot_land_is_named_then_recomputed_and_dropped(
    make, family, corpus, tmp_path, capsys
):
    """A checkpoint holding a NaN vector (as the last version wrote one from a provider):
    `doctor` names it, the next run (any executor) computes that input again instead of
    resuming it, lands everything, and the part goes with the land."""
    import pyarrow as pa

    from batch_pipeline.cli import main
    from batch_pipeline.state.checkpoints import unlandable_parts, write_part

    reference = make(home="reference")
    reference.run("run-0")
    row = reference.partition.store.open(reference.index).to_arrow().slice(0, 1).to_pylist()[0]
    poisoned = np.array(row["vector"], dtype=np.float32)
    poisoned[0] = np.nan
    subject = make()  # a home whose interrupted run left that checkpoint
    write_part(
        subject.partition.checkpoint_dir() / "an-earlier-run",
        pa.table(
            {
                "input_hash": [row["input_hash"]],
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(poisoned), len(poisoned)),
                "embedded_at": [row["embedded_at"]],
            }
        ),
    )
    named = unlandable_parts(subject.partition.staging.root)
    assert list(named.values()) == [1]
    home = str(tmp_path / "home")
    assert main(["--config", str(corpus), "--home", home, "doctor", "--product", "handbook"]) == 1
    said = capsys.readouterr().out
    assert f"checkpoint {next(iter(named))} holds 1 rows" in said
    subject.run("run-1")
    assert sorted(subject.landed()) == sorted(reference.landed())
    assert same_outputs("embed", subject.landed(), reference.landed())  # recomputed, not NaN
    assert unlandable_parts(subject.partition.staging.root) == {}
