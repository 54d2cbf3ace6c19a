"""Document briefs on the engine, with the FAKE generator: every document briefed once into
typed rows with their lineage; a rerun generates nothing, an edit regenerates that document
only, a deletion removes its brief, a prompt edit builds a new generation beside the old, an
unsatisfiable schema fails documents without landing them, and a crash resumes."""

import json
from pathlib import Path

import pytest

from batch_pipeline import cli
from batch_pipeline.briefs import kind
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.config import load_config
from batch_pipeline.index.product import open_partition
from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import write_briefs_config, write_corpus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def briefs_workspace(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    config = write_briefs_config(tmp_path, ", document_tokens: 40")
    return {"root": tmp_path, "docs": docs, "config": config, "home": tmp_path / "home"}


def product_args(ws, generator=None) -> tuple:  # noqa: ANN001
    """BriefProduct's first five arguments over the workspace, and its stores."""
    config = load_config(ws["config"])
    storage = resolve_storage(str(ws["home"]))
    tracking = TrackingStore(storage.tracking_url)
    store = VectorStore(storage.lancedb_uri)
    documents = lambda key: open_partition(config, storage, key, tracking, store)  # noqa: E731
    return (
        config,
        storage,
        "handbook",
        generator or FakeGenerator(),
        documents,
        None,
        tracking,
        store,
    )


def product_of(ws, generator=None):
    return BriefProduct(*product_args(ws, generator))


def run(product, run_id, generator=None):
    generator = generator or product.generator
    return product.partition("handbook").run(run_id, lambda: generator)


def test_every_document_is_briefed_once_into_typed_rows_with_their_lineage(briefs_workspace):
    product = product_of(briefs_workspace)
    result = run(product, "run-1")
    rows = product.briefs.rows(product.index)
    assert [r["doc_id"] for r in rows] == ["account/reset-password.md", "notes.txt", "refunds.md"]
    assert result["land"].summary.failed == {}
    for row in rows:
        assert len(row["questions"]) == 3 and row["audience"] == "owner"
        assert json.loads(row["raw_output"])["summary"] == row["summary"]
        assert row["prompt_version"] == product.template.version
        assert row["model_fingerprint"] == product.model.fingerprint
        assert row["run_id"] == "run-1" and row["finish_reason"] == "stop"
    assert any(r["truncated"] for r in rows)  # the guide is longer than 40 tokens
    assert product.index.startswith("handbook_briefs__")
    (record,) = product.tracking.partition_runs(["handbook"], 5, product.index)
    assert record["run_id"] == "run-1"


def test_a_rerun_generates_nothing_and_an_edit_regenerates_that_document_only(briefs_workspace):
    product = product_of(briefs_workspace)
    run(product, "run-1")
    fake = product.generator
    assert len(fake.generated) == 3
    run(product, "run-2")
    assert len(fake.generated) == 3  # nothing stale: nothing generated
    page = briefs_workspace["docs"] / "refunds.md"
    page.write_text(page.read_text() + "\nRefunds now take ten days.\n")
    run(product, "run-3")
    assert len(fake.generated) == 4
    by_doc = {r["doc_id"]: r for r in product.briefs.rows(product.index)}
    assert by_doc["refunds.md"]["run_id"] == "run-3"
    assert by_doc["notes.txt"]["run_id"] == "run-1"


def test_a_deleted_document_loses_its_brief(briefs_workspace):
    product = product_of(briefs_workspace)
    run(product, "run-1")
    (briefs_workspace["docs"] / "notes.txt").unlink()
    result = run(product, "run-2")
    assert result["land"].summary.deleted_ids == ["notes.txt"]
    assert [r["doc_id"] for r in product.briefs.rows(product.index)] == [
        "account/reset-password.md",
        "refunds.md",
    ]


def test_a_prompt_edit_is_a_new_generation_and_the_old_table_is_untouched(briefs_workspace):
    product = product_of(briefs_workspace)
    run(product, "run-1")
    old_index, old_rows = product.index, product.briefs.rows(product.index)
    prompt = briefs_workspace["root"] / "prompt.yaml"
    prompt.write_text(prompt.read_text().replace("support agents", "new starters"))
    product.review(lambda model: pytest.fail("no live index to embed against"))
    edited = product_of(briefs_workspace)
    assert edited.index != old_index
    run(edited, "run-2")
    assert len(edited.briefs.rows(edited.index)) == 3
    assert edited.live().index == old_index  # readers keep live until the review
    assert edited.briefs.rows(old_index) == old_rows  # and see no change in it
    assert edited.review(lambda model: pytest.fail("no index")).decision == "promoted"
    assert edited.live().index == edited.index


def test_an_unsatisfiable_schema_fails_documents_without_landing_them(briefs_workspace):
    schema_path = briefs_workspace["root"] / "schema.json"
    schema = json.loads(schema_path.read_text())
    # digits only (a pattern without length bounds, which vLLM's structured outputs enforce):
    # the FAKE generator writes words
    schema["properties"]["summary"] = {"type": "string", "pattern": "^[0-9]+$"}
    schema_path.write_text(json.dumps(schema))
    product = product_of(briefs_workspace)
    result = run(product, "run-1")
    assert set(result["land"].summary.failed) == {
        "account/reset-password.md",
        "notes.txt",
        "refunds.md",
    }
    assert product.briefs.rows(product.index) == []
    failures = product.tracking.failures_by_doc(product.index)
    assert "summary" in failures["refunds.md"]["message"]
    assert result["execute"].valid_share == 0.0
    review = product.review(lambda model: pytest.fail("no brief to embed"))
    assert review.decision == "refused" and "3 of 3 documents have no valid brief" in review.reason
    # float32 and greedy: final under their key, so nothing says the next run retries them
    assert "3 failed as often as they may (invalid outputs, tried once)" in review.reason
    assert "tries" not in review.reason and "retries" not in review.reason
    again = run(product, "run-2")  # greedy: the same key would fail the same way
    assert again["prepare"].failed_before == 3 and len(product.generator.generated) == 3
    assert set(product.tracking.failures_by_doc(product.index)) == set(
        result["land"].summary.failed
    )


class CrashingGenerator(FakeGenerator):
    """FAKE fault: dies on its first call to generate."""

    def generate(self, *args, **kwargs):
        raise RuntimeError("engine died")


def test_a_failed_execute_lands_nothing_and_the_retry_completes(briefs_workspace):
    product = product_of(briefs_workspace)
    with pytest.raises(RuntimeError, match="engine died"):
        run(product, "run-1", CrashingGenerator())
    assert product.briefs.rows(product.index) == []
    run(product, "run-2")
    assert len(product.briefs.rows(product.index)) == 3


def test_an_invalidated_run_s_briefs_are_generated_again_on_the_next_run(briefs_workspace):
    from batch_pipeline.generations.registry import GenerationRegistry
    from batch_pipeline.generations.run_history import invalidate_run

    product = product_of(briefs_workspace)
    run(product, "run-1")
    undone = invalidate_run(
        product.tracking, product.store, GenerationRegistry(product.tracking), "run-1"
    )
    assert undone.rows == 3
    assert len(product.briefs.rows(product.index)) == 3  # they keep serving until replaced
    run(product, "run-2")
    assert len(product.generator.generated) == 6
    assert {r["run_id"] for r in product.briefs.rows(product.index)} == {"run-2"}


def test_a_full_pass_with_every_brief_valid_is_promoted_and_readers_get_it(briefs_workspace):
    product = product_of(briefs_workspace)
    run(product, "run-1")
    review = product.review(lambda model: pytest.fail("nothing to embed: no live index"))
    assert review.decision == "promoted", review.reason
    assert review.scores["candidate"]["valid_share"] == 1.0
    assert product.live().index == product.index
    record = product.registry.get(product.name, product.fingerprint)
    assert (record.rows, record.documents, record.full_pass) == (3, 3, True)


def test_a_large_run_lands_in_groups_and_every_brief_lands_whole(briefs_workspace, monkeypatch):
    from batch_pipeline.briefs import land

    monkeypatch.setattr(land, "LAND_GROUP", 1)  # a commit per brief
    product = product_of(briefs_workspace)
    result = run(product, "run-1")
    assert len(product.briefs.rows(product.index)) == 3
    assert result["land"].summary.table_version >= 3  # three commits, not one


def test_the_briefs_command_prints_the_first_by_doc_id_and_says_how_many_in_all(
    briefs_workspace, capsys, monkeypatch
):
    product = product_of(briefs_workspace)
    run(product, "run-1")
    # the command reads the generation the FAKE generator built (its model names the table)
    monkeypatch.setattr(kind, "brief_product", lambda *args, **kwargs: product)
    base = ["--config", str(briefs_workspace["config"]), "--home", str(briefs_workspace["home"])]
    briefs = [*base, "briefs", "--collection", "handbook", "--candidate"]

    assert product.briefs.first_rows(product.index, 2) == product.briefs.rows(product.index)[:2]
    assert cli.main([*briefs, "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "the first 2 of 3 briefs by doc id; --limit 0 prints all" in out.splitlines()[0]
    assert "account/reset-password.md" in out and "notes.txt" in out
    assert "refunds.md" not in out  # the third by doc id

    assert cli.main([*briefs, "--limit", "2", "--json"]) == 0
    printed = capsys.readouterr()
    assert [r["doc_id"] for r in json.loads(printed.out)] == [
        "account/reset-password.md",
        "notes.txt",
    ]
    assert "the first 2 of 3 briefs" in printed.err  # the JSON itself stays a plain list

    assert cli.main([*briefs, "--limit", "0", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    assert cli.main([*briefs, "--json"]) == 0  # the default limit is above 3
    printed = capsys.readouterr()
    assert len(json.loads(printed.out)) == 3 and printed.err == ""
    assert cli.main([*briefs, "--limit", "1", "--doc-id", "refunds.md", "--json"]) == 0
    assert [r["doc_id"] for r in json.loads(capsys.readouterr().out)] == ["refunds.md"]

    with pytest.raises(SystemExit):
        cli.main([*briefs, "--limit", "-1"])
    assert (
        "argument --limit: expected a whole number, 0 for all, not '-1'" in capsys.readouterr().err
    )


def test_the_briefs_read_a_document_as_collect_does_size_limit_included(
    briefs_workspace, fake_embedder
):
    """A document the index has landed and collect therefore does not read again is read by
    the briefs through the same reader: over limits.max_document_bytes it is not briefed, and
    prepare names why as collect does (the briefs' own copy skipped the limit)."""
    docs = briefs_workspace["docs"]
    index = product_of(briefs_workspace).documents_for("handbook")
    index.run("index-1", fake_embedder)  # every document landed: unchanged from now on
    largest = max(docs.rglob("*.*"), key=lambda path: path.stat().st_size)
    limit = largest.stat().st_size - 1
    config = briefs_workspace["config"]
    config.write_text(config.read_text() + f"limits: {{max_document_bytes: {limit}}}\n")
    product = product_of(briefs_workspace)
    result = run(product, "run-1")
    doc_id = largest.relative_to(docs).as_posix()
    assert result["prepare"].unreadable == {
        doc_id: f"too_large: {limit + 1} bytes is over max_document_bytes ({limit})"
    }
    assert doc_id not in {row["doc_id"] for row in product.briefs.rows(product.index)}


class OfficeFailingGenerator(FakeGenerator):
    """FAKE fault: an output that is no JSON for the page about the office (notes.txt)."""

    def _answer(self, prompt, schema):  # noqa: ANN001, ANN202
        return "not json" if "office" in prompt.user else super()._answer(prompt, schema)


def test_a_rerun_with_nothing_changed_does_not_promote_a_generation_lacking_briefs(
    briefs_workspace,
):
    """On a rerun the document that failed before dropped out of the documents expected, so
    the generation counted 2 of 2 briefed and was promoted, and doctor said so. Every live
    document of the full pass counts, the one that failed included."""
    product = product_of(briefs_workspace, OfficeFailingGenerator())
    first = run(product, "run-1")
    assert set(first["land"].summary.failed) == {"notes.txt"}
    review = product.review(lambda model: pytest.fail("no live index"))
    assert review.decision == "refused" and "1 of 3 documents have no valid brief" in review.reason
    again = run(product, "run-2")
    assert again["prepare"].failed_before == 1
    review = product.review(lambda model: pytest.fail("no live index"))
    assert review.decision == "refused" and "1 of 3 documents have no valid brief" in review.reason
    assert product.record().documents == 3 and product.record().rows == 2


def test_two_documents_with_the_same_content_each_get_their_own_brief(briefs_workspace):
    """The staleness key is the document's and its content's: a.md and b.md, identical,
    each land their own brief, rendered with their own `$doc_id` (the key was the content's
    alone, and the table held b.md's brief twice and none of a.md, while it counted
    complete)."""
    docs = briefs_workspace["docs"]
    (docs / "a.md").write_text("# Same\n\nThe same words in two places.\n")
    (docs / "b.md").write_text("# Same\n\nThe same words in two places.\n")
    product = product_of(briefs_workspace)
    run(product, "run-1")
    rows = {r["doc_id"]: r for r in product.briefs.rows(product.index)}
    assert sorted(rows) == ["a.md", "account/reset-password.md", "b.md", "notes.txt", "refunds.md"]
    assert rows["a.md"]["content_hash"] == rows["b.md"]["content_hash"]
    assert rows["a.md"]["input_hash"] != rows["b.md"]["input_hash"]
    assert product.store.count_rows(product.index) == 5
    again = run(product_of(briefs_workspace), "run-2")
    assert again["execute"].stats.requests == 0  # each under its own key, nothing stale


def test_a_prompt_refused_by_an_engine_setting_is_generated_once_the_setting_is_raised(
    briefs_workspace,
):
    """A refusal for `max_model_len` is the engine setting's failure, not the document's: it
    is listed with its reason, not tied to the document's key, and once the setting is raised
    the next run generates it (it was never tried again)."""
    from batch_pipeline.stages.prompt_plan import PromptPlanSettings

    config, storage, name, generator, documents, _, tracking, store = product_args(briefs_workspace)
    settings = PromptPlanSettings(max_model_len=300)
    tight = BriefProduct(config, storage, name, generator, documents, settings, tracking, store)
    first = run(tight, "run-1")["land"].summary
    assert len(first.failed) == 3 and all("max_model_len" in r for r in first.failed.values())
    assert first.failed_keys == {}  # the setting's, not the documents'
    failures = tight.tracking.failures_by_doc(tight.index)
    assert len(failures) == 3 and not any(f.get("content_hash") for f in failures.values())

    roomy = product_of(briefs_workspace)  # max_model_len back to its default
    assert roomy.fingerprint == tight.fingerprint  # an engine setting: the same generation
    second = run(roomy, "run-2")
    assert second["execute"].stats.requests == 3 and second["land"].summary.failed == {}
    assert len(roomy.briefs.rows(roomy.index)) == 3


def test_an_engine_with_another_max_model_len_than_the_plan_s_is_refused_before_it_runs(
    briefs_workspace,
):
    """The plan refused prompts against its max_model_len; an engine taking another would cut
    outputs short (vLLM's run-batch shortens max_tokens to fit) or refuse what fits: execute
    refuses in one line before any prompt is sent, and the plan made again runs."""
    from types import SimpleNamespace

    from batch_pipeline.config import ConfigError
    from batch_pipeline.stages.prompt_plan import PromptPlanSettings

    class ShortEngine(FakeGenerator):
        """FAKE engine whose settings say max_model_len 1024."""

        settings = SimpleNamespace(max_model_len=1024)

    config, storage, name, _, documents, _, tracking, store = product_args(briefs_workspace)
    engine = ShortEngine()
    long_plan = PromptPlanSettings(max_model_len=2048)
    planned_long = BriefProduct(
        config, storage, name, engine, documents, long_plan, tracking, store
    )
    with pytest.raises(ConfigError, match="the plan was made for 2048 and the engine takes 1024"):
        run(planned_long, "run-1")
    assert engine.generated == []  # nothing sent
    agreed = BriefProduct(
        config,
        storage,
        name,
        engine,
        documents,
        PromptPlanSettings(max_model_len=1024),
        tracking,
        store,
    )
    assert run(agreed, "run-2")["execute"].stats.requests == 3


class FailingEngine(FakeGenerator):
    """FAKE fault: the engine ends the requests whose page matches `fails` in an error
    (finish_reason=error, as vLLM does when a request fails inside it)."""

    def __init__(self, fails=lambda prompt: True) -> None:  # noqa: ANN001
        super().__init__()
        self.fails = fails

    def generate(self, prompts, sampling, schema=None, stats=None, on_finished=None):  # noqa: ANN001, ANN201
        from dataclasses import replace

        out = super().generate(prompts, sampling, schema, stats, on_finished)
        return [
            replace(o, text="", finish_reason="error") if self.fails(p) else o
            for p, o in zip(prompts, out, strict=True)
        ]


def test_a_run_whose_every_request_failed_in_the_engine_fails_as_the_run_s(
    briefs_workspace, capsys, monkeypatch
):
    """Every output an engine error was landed as three documents' own invalid outputs, never
    tried again. Now the run fails in one line, nothing is recorded against the documents and
    nothing is checkpointed: the next run briefs all three."""
    from batch_pipeline.stages.generate import EngineFaultError

    product = product_of(briefs_workspace)
    with pytest.raises(EngineFaultError, match="every one of the 3 requests the engine ran"):
        run(product, "run-1", FailingEngine())
    assert product.tracking.failures_by_doc(product.index) == {}
    assert product.briefs.rows(product.index) == []
    healthy = FakeGenerator()
    run(product, "run-2", healthy)
    assert len(healthy.generated) == 3 and len(product.briefs.rows(product.index)) == 3

    args = ["--config", str(briefs_workspace["config"]), "--home", str(briefs_workspace["home"])]
    (briefs_workspace["docs"] / "notes.txt").write_text("The office moved to the harbour.")
    failing = product_of(briefs_workspace, FailingEngine())
    monkeypatch.setattr(kind, "brief_product", lambda *args, **kwargs: failing)
    capsys.readouterr()
    assert cli.main([*args, "run", "--collection", "handbook", "--kind", "briefs"]) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert said.startswith("batch-pipeline: every one of the 1 requests the engine ran")


def test_a_request_failed_in_the_engine_is_sent_again_and_never_checkpointed(briefs_workspace):
    product = product_of(briefs_workspace)
    office = lambda prompt: "office" in prompt.user  # noqa: E731
    first = run(product, "run-1", FailingEngine(office))
    assert set(first["land"].summary.failed) == {"notes.txt"}  # listed, with the engine's reason
    assert "finish_reason=error" in first["land"].summary.failed["notes.txt"]
    assert first["execute"].engine_faults == 1
    again = FakeGenerator()
    second = run(product, "run-2", again)  # not the document's failure: tried again
    assert second["prepare"].failed_before == 0 and len(again.generated) == 1
    assert len(product.briefs.rows(product.index)) == 3


class HalfPrecisionOfficeFailing(OfficeFailingGenerator):
    """FAKE: the office page's output is invalid, from an engine in bfloat16, where a rerun's
    batches may change a greedy output; valid from the `heals`-th call on, when given."""

    dtype = "bfloat16"

    def __init__(self, heals: int | None = None) -> None:
        super().__init__()
        self.calls, self.heals = 0, heals

    def _answer(self, prompt, schema):  # noqa: ANN001, ANN202
        if "office" in prompt.user:
            self.calls += 1
            if self.heals is not None and self.calls >= self.heals:
                return FakeGenerator._answer(self, prompt, schema)
        return super()._answer(prompt, schema)


def test_an_invalid_output_in_bfloat16_is_tried_once_more_and_float32_s_is_not(
    briefs_workspace,
):
    """Measured (bench.rerun): in bfloat16 8 of 40 greedy outputs changed with the batch, and
    2 changed validity; in float32 none did. So an invalid bfloat16 output gets one more try,
    in a later run's batches; a second under the same key is final until the key changes."""
    generator = HalfPrecisionOfficeFailing()
    product = product_of(briefs_workspace, generator)
    assert product.invalid_output_tries == 2
    assert set(run(product, "run-1")["land"].summary.failed) == {"notes.txt"}
    second = run(product, "run-2")
    assert second["prepare"].failed_before == 0 and generator.calls == 2  # tried again
    third = run(product, "run-3")
    assert third["prepare"].failed_before == 1 and generator.calls == 2  # its two tries
    (briefs_workspace["docs"] / "notes.txt").write_text("The office moved to the harbour.")
    run(product, "run-4")  # a new key: its tries start again
    assert generator.calls == 3
    assert product.tracking.failures_by_doc(product.index)["notes.txt"]["attempts"] == 1

    assert product_of(briefs_workspace).invalid_output_tries == 1  # the float32 FAKE


def test_a_retried_bfloat16_output_that_comes_out_valid_lands(briefs_workspace):
    generator = HalfPrecisionOfficeFailing(heals=2)
    product = product_of(briefs_workspace, generator)
    assert set(run(product, "run-1")["land"].summary.failed) == {"notes.txt"}
    assert run(product, "run-2")["land"].summary.failed == {}
    assert len(product.briefs.rows(product.index)) == 3
    assert product.tracking.failures_by_doc(product.index) == {}


def test_a_briefs_table_that_lost_a_data_file_is_repaired_like_any_product_s(
    briefs_workspace, capsys, monkeypatch
):
    """`repair` was the vector index's alone (`--collection`): a briefs table with a data file
    lost could not be repaired. `repair --product` serves every product's generation."""
    product = product_of(briefs_workspace)
    run(product, "run-1")
    (briefs_workspace["docs"] / "late.md").write_text("# Late\n\nA page added by the second run.\n")
    run(product, "run-2")
    assert product.review(lambda model: pytest.fail("no live index")).decision == "promoted"
    data = briefs_workspace["home"] / "lancedb" / f"{product.index}.lance" / "data"
    newest = max(data.iterdir(), key=lambda path: path.stat().st_mtime_ns)
    newest.unlink()

    monkeypatch.setattr(kind, "brief_product", lambda *args, **kwargs: product)  # the FAKE's
    args = ["--config", str(briefs_workspace["config"]), "--home", str(briefs_workspace["home"])]
    name = "handbook_briefs"
    capsys.readouterr()
    assert cli.main([*args, "doctor", "--product", name]) == 1
    out = capsys.readouterr().out
    assert newest.name in out and f"repair --product {name} --yes` restores version" in out
    assert cli.main([*args, "repair", "--product", name]) == 1  # says what, does not
    assert "run again with --yes" in capsys.readouterr().out
    assert cli.main([*args, "repair", "--product", name, "--yes"]) == 0
    assert product.store.damage(product.index) is None
    run(product, "run-3")  # what the restored version lacks is stale again: briefed
    assert len(product.briefs.rows(product.index)) == 4
    assert cli.main([*args, "doctor", "--product", name]) in (0, 1)
    assert "damaged" not in capsys.readouterr().out


def test_a_disk_that_fills_during_generation_stops_in_one_line_and_the_rerun_resumes(
    briefs_workspace, capsys, monkeypatch
):
    """A large briefs run on a filling disk: the third checkpoint cannot be written. The run
    stops in one line (exit 2), nothing lands, and once there is room the rerun generates
    only what no checkpoint holds."""
    import errno

    from batch_pipeline.stages import checkpointed

    for n in range(6):
        (briefs_workspace["docs"] / f"page-{n}.md").write_text(f"# Page {n}\n\nText {n}.\n")
    from batch_pipeline.stages.prompt_plan import PromptPlanSettings

    generator = FakeGenerator()
    config, storage, name, _, documents, _, tracking, store = product_args(briefs_workspace)
    one = PromptPlanSettings(chunk_size=1)  # a checkpoint per output
    product = BriefProduct(config, storage, name, generator, documents, one, tracking, store)
    monkeypatch.setattr(kind, "brief_product", lambda *args, **kwargs: product)
    written = []
    write = checkpointed.write_part

    def filling(folder, rows):  # noqa: ANN001, ANN202 - FAULT: the disk fills at the third
        if len(written) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(folder))
        written.append(rows.num_rows)
        return write(folder, rows)

    monkeypatch.setattr(checkpointed, "write_part", filling)
    args = ["--config", str(briefs_workspace["config"]), "--home", str(briefs_workspace["home"])]
    capsys.readouterr()
    assert cli.main([*args, "run", "--collection", "handbook", "--kind", "briefs"]) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith("batch-pipeline: no space left on the device") and "kept" in said
    assert product.briefs.rows(product.index) == []
    first = len(generator.generated)
    monkeypatch.setattr(checkpointed, "write_part", write)  # room again
    assert cli.main([*args, "run", "--collection", "handbook", "--kind", "briefs"]) == 0
    assert len(product.briefs.rows(product.index)) == 9
    assert len(generator.generated) - first == 9 - sum(written)  # only what no checkpoint held


def test_a_briefs_run_that_lost_its_lease_to_a_long_outage_stops_before_landing(
    briefs_workspace, monkeypatch
):
    """A tracking store that did not answer for longer than the partition lease's term: the
    run's lease is gone (another run may hold the partition by now), so it lands nothing and
    records nothing; the next run briefs every document, resuming from its checkpoints."""
    from batch_pipeline.state.tracking import LeaseLostError
    from tests.support import skewed_lease_clock

    offset = skewed_lease_clock(monkeypatch)

    class Outage(FakeGenerator):
        def generate(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            offset["s"] += 10_000  # as if the tracking store had not answered for hours
            return super().generate(*args, **kwargs)

    product = product_of(briefs_workspace)
    with pytest.raises(LeaseLostError, match="lost the lease"):
        run(product, "run-1", Outage())
    assert product.tracking.runs_with_id("run-1") == []  # nothing landed or recorded
    assert product.briefs.rows(product.index) == []
    offset["s"] = 0.0  # the store answers again
    healthy = FakeGenerator()
    run(product, "run-2", healthy)
    assert len(product.briefs.rows(product.index)) == 3 and healthy.generated == []  # resumed


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--kind", "briefs", "--data-parallel-size", "2"],
            "--data-parallel-size: above 1 needs executor vllm-run-batch",
        ),
        (
            ["--kind", "briefs", "--executor", "vllm-run-batch", "--tensor-parallel-size", "2"],
            "--tensor-parallel-size: 2 does not split SmolLM2-135M-Instruct's 9 attention heads",
        ),
        (
            ["--tensor-parallel-size", "3"],
            "--tensor-parallel-size: for --kind briefs only, not --kind index",
        ),
        (
            ["--api-base", "http://127.0.0.1:9"],
            "--api-base: for --executor anthropic-batch or openai-batch only",
        ),
        (
            ["--executor", "openai-batch"],
            "--api-base: the openai-batch executor needs the Batch API's address",
        ),
        (
            ["--executor", "openai-batch", "--dtype", "float16", "--api-base", "http://x/v1"],
            "--dtype: 'float16' is the provider's to choose on a Batch API executor",
        ),
        (
            ["--kind", "briefs", "--executor", "local"],
            "--executor 'local' runs no generate model; generate executors: vllm, ",
        ),
    ],
)
def test_run_refuses_executor_flags_no_engine_can_take_before_anything_runs(
    briefs_workspace, capsys, flags, said
):
    args = ["--config", str(briefs_workspace["config"]), "--home", str(briefs_workspace["home"])]
    assert cli.main([*args, "run", "--collection", "handbook", *flags, "--run-id", "r1"]) == 2
    assert capsys.readouterr().err.strip().startswith(f"batch-pipeline: {said}")
    tracking = TrackingStore(resolve_storage(str(briefs_workspace["home"])).tracking_url)
    assert tracking.runs_with_id("r1") == []  # refused before any stage ran


def test_an_api_base_s_credentials_are_never_printed(briefs_workspace, capsys, monkeypatch):
    monkeypatch.setenv("BP_TEST_GATEWAY_KEY", "sk-gateway-0123456789")
    base = "http://gwuser:GWPASSWORD9@127.0.0.1:9/v1?api-key=QUERYSECRET7&region=eu"
    args = ["--config", str(briefs_workspace["config"]), "--home", str(briefs_workspace["home"])]
    code = cli.main(
        [
            *args,
            "run",
            "--collection",
            "handbook",
            "--kind",
            "briefs",
            "--executor",
            "openai-batch",
            "--api-base",
            base,
            "--api-key-env",
            "BP_TEST_GATEWAY_KEY",
            "--run-id",
            "r1",
        ]
    )
    said = capsys.readouterr().err
    assert code == 2 and "Connection error" in said, said
    assert "http://gwuser:***@127.0.0.1:9/v1?api-key=***&region=eu" in said
    assert "GWPASSWORD9" not in said and "QUERYSECRET7" not in said
