"""The document briefs in Dagster, with the FAKE generator and embedder: the group reads the
collection's own source_documents, lands typed rows and passes its blocking valid-output
check; a rerun generates nothing; a collection without briefs materialises none of them; the
embedding job that sensors and the schedule launch includes them."""

import shutil
from pathlib import Path

import dagster as dg
import pytest

from batch_pipeline.inference.fake import FakeGenerator
from resources.testing import FakeGenerationResource, FakeInferenceResource
from tests.support import (
    STAGE_ASSETS,
    metadata_of,
    stage_resources,
    write_briefs_config,
    write_corpus,
)

REPO = Path(__file__).resolve().parents[2]
BRIEF_ASSETS = [
    "brief_prompts",
    "brief_plan",
    "brief_generations",
    "document_briefs",
    "question_rows",
]


@pytest.fixture()
def briefs_workspace(tmp_path):
    docs = write_corpus(tmp_path / "docs")
    write_corpus(tmp_path / "notes")
    config = write_briefs_config(
        tmp_path,
        more='  - name: notes\n    source: {kind: filesystem, path: notes, glob: "**/*"}\n',
    )
    return {"root": tmp_path, "docs": docs, "config": config, "home": tmp_path / "home"}


def materialize_with_briefs(workspace, instance, partition="handbook", tags=None):
    from batch_pipeline.definitions import build_definitions

    defs = build_definitions(workspace["config"])
    resources = {
        **stage_resources(workspace),
        "inference": FakeInferenceResource(device="cpu"),
        "generation": FakeGenerationResource(),
    }
    return dg.materialize(
        [defs.get_assets_def(name) for name in (*STAGE_ASSETS, *BRIEF_ASSETS)],
        partition_key=partition,
        instance=instance,
        resources=resources,
        tags=tags,
        raise_on_error=False,
    )


def test_the_briefs_land_from_the_collection_s_collect_and_pass_their_check(briefs_workspace):
    with dg.instance_for_test() as instance:
        result = materialize_with_briefs(briefs_workspace, instance)
        assert result.success
        prompts = metadata_of(result, "brief_prompts")
        assert prompts["briefs_stale"] == 3
        generations = metadata_of(result, "brief_generations")
        assert generations["requests_generated"] == 3 and generations["valid_share"] == 1.0
        land = metadata_of(result, "document_briefs")
        assert land["dagster/row_count"] == 3 and land["briefs_landed"] == 3
        assert land["review_state"] == "live"
        assert land["generation"].startswith("handbook_briefs__")
        (check,) = [
            c for c in result.get_asset_check_evaluations() if c.check_name == "valid_output_rate"
        ]
        assert check.passed
        again = materialize_with_briefs(briefs_workspace, instance)
        assert metadata_of(again, "brief_prompts")["briefs_stale"] == 0
        assert metadata_of(again, "brief_generations")["requests_generated"] == 0


def test_question_rows_land_with_index_questions_and_report_retrieval_both_ways(
    briefs_workspace,
):
    config = briefs_workspace["config"]
    (briefs_workspace["root"] / "eval.jsonl").write_text(
        '{"query": "reset my password", "relevant": ["account/reset-password.md"]}\n'
    )
    config.write_text(
        config.read_text().replace(
            "schema.json}\n",
            "schema.json, index_questions: true}\n    evaluation: {path: eval.jsonl, k: 3}\n",
            1,
        )
    )
    with dg.instance_for_test() as instance:
        result = materialize_with_briefs(briefs_workspace, instance)
        assert result.success
        questions = metadata_of(result, "question_rows")
        assert questions["questions_status"] == "landed"
        assert questions["questions_embedded"] == 9 and questions["question_rows"] == 9
        assert questions["dagster/row_count"] == 9
        assert "handbook_questions__" in str(questions["dagster/uri"])
        assert {"recall_at_3_chunks", "recall_at_3_with_questions"} <= set(questions)
        (check,) = [
            c
            for c in result.get_asset_check_evaluations()
            if c.asset_key.to_user_string() == "question_rows"
        ]
        assert check.check_name == "indexes_current" and check.passed
        values = {k: v.value for k, v in check.metadata.items()}
        assert values["unindexed_rows"] == 0 and values["problems"] == "none"
        again = materialize_with_briefs(briefs_workspace, instance)
        assert metadata_of(again, "question_rows")["questions_embedded"] == 0


def test_question_rows_mid_land_do_not_fail_the_index_s_check(briefs_workspace):
    """The question rows land under their own table's lease and question_rows checks their
    indexes; the vector index's (blocking) check reads its own table only, so a question land
    caught between its commit and its index upkeep cannot fail it."""
    import pyarrow as pa

    from batch_pipeline.definitions import build_definitions
    from batch_pipeline.names import question_index
    from batch_pipeline.state.storage import resolve_storage
    from batch_pipeline.state.vector_store import VectorStore

    config = briefs_workspace["config"]
    config.write_text(
        config.read_text().replace("schema.json}\n", "schema.json, index_questions: true}\n", 1)
    )
    with dg.instance_for_test() as instance:
        first = materialize_with_briefs(briefs_workspace, instance)
        generation = metadata_of(first, "vector_index")["dagster/uri"]
        name = question_index(Path(str(generation)).stem)
        assert metadata_of(first, "question_rows")["dagster/row_count"] == 9
        store = VectorStore(resolve_storage(str(briefs_workspace["home"])).lancedb_uri)
        table = store.open(name)  # another run's question land, committed, not yet indexed
        row = table.to_arrow().slice(0, 1)
        column = row.schema.get_field_index("chunk_id")
        table.add(row.set_column(column, "chunk_id", pa.array(["mid-land#question0"])))
        (briefs_workspace["docs"] / "refunds.md").write_text("# Refunds\n\nNow in 3 days.\n")
        defs = build_definitions(config)
        result = dg.materialize(
            [defs.get_assets_def(name) for name in STAGE_ASSETS],
            partition_key="handbook",
            instance=instance,
            resources=stage_resources(briefs_workspace),
            raise_on_error=False,
        )
        (found,) = [
            c for c in result.get_asset_check_evaluations() if c.check_name == "indexes_current"
        ]
        assert found.passed, found.metadata
        assert not any("_questions__" in key for key in found.metadata)


def test_a_collection_without_briefs_materialises_none_of_them(briefs_workspace):
    with dg.instance_for_test() as instance:
        result = materialize_with_briefs(briefs_workspace, instance, partition="notes")
        assert result.success
        for name in BRIEF_ASSETS:
            assert result.asset_materializations_for_node(name) == []
        assert metadata_of(result, "vector_index")["documents_landed"] == 3


def test_the_embedding_job_runs_the_briefs_and_their_check_blocks(briefs_workspace):
    from batch_pipeline.definitions import build_definitions

    defs = build_definitions(briefs_workspace["config"])
    job = defs.resolve_job_def("embedding_job")
    assert set(BRIEF_ASSETS) <= {
        key.to_user_string() for key in job.asset_layer.executable_asset_keys
    }
    spec = next(
        s
        for s in defs.get_assets_def("document_briefs").check_specs
        if s.name == "valid_output_rate"
    )
    assert spec.blocking and spec.description
    execute = defs.get_assets_def("brief_generations")
    assert execute.op.pool == "gpu"


def test_a_one_page_publish_regenerates_that_page_s_brief_only(briefs_workspace):
    from batch_pipeline.definitions import build_definitions
    from tests.support import tick

    config = briefs_workspace["config"]
    config.write_text(config.read_text() + "sensor: {window_seconds: 0, max_docs_per_run: 50}\n")
    defs = build_definitions(config)
    resources = {
        **stage_resources(briefs_workspace),
        "inference": FakeInferenceResource(device="cpu"),
        "generation": FakeGenerationResource(),
    }

    def launch(request):  # what the daemon does with the sensor's run request
        result = dg.materialize(
            [defs.get_assets_def(name) for name in (*STAGE_ASSETS, *BRIEF_ASSETS)],
            partition_key=request.partition_key,
            run_config=request.run_config,
            tags=request.tags,
            instance=instance,
            resources=resources,
        )
        assert result.success
        return result

    with dg.instance_for_test() as instance:
        first = tick(defs, briefs_workspace, instance)
        (full,) = first.run_requests
        assert metadata_of(launch(full), "brief_generations")["requests_generated"] == 3
        page = briefs_workspace["docs"] / "refunds.md"
        page.write_text(page.read_text() + "\nRefunds now take ten days.\n")
        (request,) = tick(defs, briefs_workspace, instance, first.cursor).run_requests
        assert request.job_name in (None, "embedding_job")
        published = launch(request)
        assert metadata_of(published, "brief_prompts")["briefs_stale"] == 1
        assert metadata_of(published, "brief_generations")["requests_generated"] == 1
        assert metadata_of(published, "document_briefs")["briefs_landed"] == 1


def test_the_nightly_run_forces_the_briefs_review_and_an_empty_source_holds_their_deletions(
    briefs_workspace,
):
    """The policies of every product, in Dagster: the nightly reconciliation re-reviews a
    generation a plain no-op run leaves alone, and a source that comes back empty keeps the
    briefs, failing the land's no_mass_deletion_held check."""
    with dg.instance_for_test() as instance:
        for _ in range(2):  # the second run's review also scores faithfulness to live
            materialize_with_briefs(briefs_workspace, instance)
        noop = materialize_with_briefs(briefs_workspace, instance)
        assert metadata_of(noop, "document_briefs")["review_evaluated"] is False
        nightly = materialize_with_briefs(
            briefs_workspace, instance, tags={"batch_pipeline/mode": "reconcile"}
        )
        land = metadata_of(nightly, "document_briefs")
        assert land["review_evaluated"] is True and land["generations_dropped"] == 0

        shutil.rmtree(briefs_workspace["docs"])
        briefs_workspace["docs"].mkdir()
        emptied = materialize_with_briefs(briefs_workspace, instance)
        land = metadata_of(emptied, "document_briefs")
        assert land["deletions_held"] == 3 and land["briefs_deleted"] == 0
        (held,) = [
            c
            for c in emptied.get_asset_check_evaluations()
            if c.check_name == "no_mass_deletion_held" and c.asset_key.path == ["document_briefs"]
        ]
        assert not held.passed


class PromptEditingGenerator(FakeGenerator):
    """FAKE generator that edits the prompt file as execute starts generating, as an
    operator's edit lands in the middle of a run."""

    def __init__(self, prompt: Path, model) -> None:  # noqa: ANN001
        super().__init__(model)
        self.prompt = prompt

    def stream(self, prompts, sampling, schema=None, stats=None, window=256):  # noqa: ANN001, ANN201
        if "edited" not in self.prompt.read_text():
            self.prompt.write_text(self.prompt.read_text().replace("Article:", "edited Article:"))
        return super().stream(prompts, sampling, schema, stats, window)


class PromptEditingResource(FakeGenerationResource):
    prompt_path: str

    def generator(self) -> FakeGenerator:  # type: ignore[override]
        if self._fake is None:
            self._fake = PromptEditingGenerator(Path(self.prompt_path), self.chat_model())
        return self._fake


def test_a_prompt_edited_during_a_run_is_the_next_run_s(briefs_workspace):
    """A run pins its briefs' prompt, schema and fingerprint at its first step: a prompt edited
    while it generates does not relabel what it renders (the old prompt's briefs landed in
    the new prompt's generation, under the new prompt_version); the next run builds the new
    prompt's generation."""
    from batch_pipeline.definitions import build_definitions

    prompt = briefs_workspace["root"] / "prompt.yaml"
    before = briefs_workspace["root"] / "prompt.before.yaml"
    shutil.copy(prompt, before)
    defs = build_definitions(briefs_workspace["config"])
    resources = {
        **stage_resources(briefs_workspace),
        "inference": FakeInferenceResource(device="cpu"),
        "generation": PromptEditingResource(prompt_path=str(prompt)),
    }
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [defs.get_assets_def(name) for name in (*STAGE_ASSETS, *BRIEF_ASSETS)],
            partition_key="handbook",
            instance=instance,
            resources=resources,
        )
        assert result.success
        assert "edited" in prompt.read_text()  # the edit happened mid-run
        land = metadata_of(result, "document_briefs")
        prepared = metadata_of(result, "brief_prompts")
    from batch_pipeline.config import BRIEF_PLACEHOLDERS
    from batch_pipeline.config.prompt import load_prompt

    old_version = load_prompt(before, BRIEF_PLACEHOLDERS).version
    new_version = load_prompt(prompt, BRIEF_PLACEHOLDERS).version
    assert old_version != new_version
    assert land["prompt_version"] == old_version  # what the run rendered and landed
    assert land["briefs_landed"] == 3 and prepared["briefs_stale"] == 3


def test_a_sharded_collection_s_briefs_land_per_shard_and_go_live_after_the_last(tmp_path):
    from tests.support import many_articles

    many_articles(tmp_path / "docs", count=8)
    config = write_briefs_config(tmp_path, collection="    shards: 2\n", glob=None)
    workspace = {"root": tmp_path, "config": config, "home": tmp_path / "home"}
    with dg.instance_for_test() as instance:
        first = materialize_with_briefs(workspace, instance, partition="handbook-s00")
        assert first.success
        land = metadata_of(first, "document_briefs")
        assert land["review_state"] == "building"  # the other shard has had no pass
        second = materialize_with_briefs(workspace, instance, partition="handbook-s01")
        assert second.success
        land = metadata_of(second, "document_briefs")
        assert land["dagster/row_count"] == 8 and land["review_state"] == "live"
        landed = metadata_of(first, "document_briefs")["briefs_landed"] + land["briefs_landed"]
        assert landed == 8  # each shard briefed its own share
