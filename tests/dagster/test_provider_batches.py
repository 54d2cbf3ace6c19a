"""The briefs in Dagster on the `openai-batch` executor, against the LOOPBACK EMULATOR of the
OpenAI Batch API and the FAKE generator: the generating step submits and returns; the
provider-batch sensor waits while the batch runs, then requests one run of the partition,
tagged with the run that submitted it; that run collects the batch and lands the briefs."""

from pathlib import Path

import dagster as dg
import pytest

from resources.testing import FakeGenerationResource
from sensors.provider_batches import SUBMITTED_BY
from tests.support import (
    STAGE_ASSETS,
    metadata_of,
    stage_resources,
    write_briefs_config,
    write_corpus,
)

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "BP_TEST_BATCH_API_KEY"
BRIEF_ASSETS = ["brief_prompts", "brief_plan", "brief_generations", "document_briefs"]


@pytest.fixture()
def workspace(tmp_path, batch_api, monkeypatch):
    monkeypatch.setenv(KEY_ENV, batch_api.api_key)
    write_corpus(tmp_path / "docs")
    config = write_briefs_config(tmp_path)
    ws = {"root": tmp_path, "config": config, "home": tmp_path / "home"}
    generation = FakeGenerationResource(
        executor="openai-batch",
        api_base=batch_api.url,
        api_key_env=KEY_ENV,
        price_per_million_input_tokens=0.075,
        price_per_million_output_tokens=0.30,
    )
    ws["resources"] = {**stage_resources(ws, fake_model=True), "generation": generation}
    return ws


def materialize(ws, instance, names, tags=None):  # noqa: ANN001, ANN201
    from batch_pipeline.definitions import build_definitions

    defs = build_definitions(ws["config"])
    return dg.materialize(
        [defs.get_assets_def(name) for name in names],
        partition_key="handbook",
        instance=instance,
        resources=ws["resources"],
        tags=tags,
        raise_on_error=False,
    )


def tick(ws, instance, sensor="provider_batches_sensor", resource="generation"):  # noqa: ANN001, ANN201
    from batch_pipeline.definitions import build_definitions

    sensor = build_definitions(ws["config"]).get_sensor_def(sensor)
    resources = {k: ws["resources"][k] for k in ("pipeline", resource)}
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        return sensor(context)


def test_the_step_submits_and_the_sensor_starts_the_run_that_lands_the_batch(workspace, batch_api):
    batch_api.hold = True  # the provider takes its time
    with dg.instance_for_test() as instance:
        first = materialize(workspace, instance, [*STAGE_ASSETS, *BRIEF_ASSETS])
        assert first.success
        generated = metadata_of(first, "brief_generations")
        assert generated["executor"] == "openai-batch" and generated["batches_pending"] == 1
        assert metadata_of(first, "document_briefs")["briefs_landed"] == 0
        waiting = tick(workspace, instance)
        assert not waiting.run_requests and "still running" in waiting.skip_reason.skip_message

        batch_api.hold, batch_api.polls_to_finish = False, 1
        ready = tick(workspace, instance)
        (request,) = ready.run_requests
        assert request.partition_key == "handbook"
        assert request.tags[SUBMITTED_BY] == first.run_id
        assert tick(workspace, instance).run_requests[0].run_key == request.run_key  # stable

        second = materialize(workspace, instance, BRIEF_ASSETS, tags=request.tags)
        assert second.success
        land = metadata_of(second, "document_briefs")
        assert land["briefs_landed"] == 3 and land["review_state"] == "live"
        assert land["execute_cost"] > 0  # the provider's tokens at its batch prices
        assert len(batch_api.created) == 1  # collected, never sent again
        assert land["submitted_by"] == first.run_id  # the two Dagster runs are one run
        pipeline = workspace["resources"]["pipeline"]
        with dg.build_resources({"pipeline": pipeline}) as built:
            tracking = built.pipeline.product_env().tracking

            def briefs_runs(run_id: str) -> list[dict]:  # the index landed in the first too
                return [r for r in tracking.runs_with_id(run_id) if "_briefs__" in r["generation"]]

            assert briefs_runs(first.run_id) == []
            (one,) = briefs_runs(second.run_id)
            assert one["submitted_by"] == first.run_id
            assert one["started_at"] <= instance.get_run_record_by_id(second.run_id).start_time
        idle = tick(workspace, instance)
        assert "no provider batch in flight" in idle.skip_reason.skip_message


def test_the_index_embeds_through_the_inference_resource_s_batch_api(workspace, batch_api):
    """The collection's stage assets on the openai-batch embedding executor: the step
    submits and returns, and lands nothing while the batch runs (no document fails); the
    briefs' sensor leaves the index's batch alone; the collections' job's sensor asks the
    provider through the inference resource and, once the batch is done, starts the run that
    collects it and lands every document, sending nothing again."""
    from resources.inference import InferenceResource

    workspace["resources"]["inference"] = InferenceResource(
        executor="openai-batch", api_base=batch_api.url, api_key_env=KEY_ENV
    )
    batch_api.hold = True
    with dg.instance_for_test() as instance:
        first = materialize(workspace, instance, STAGE_ASSETS)
        assert first.success
        executed = metadata_of(first, "chunk_embeddings")
        assert executed["executor"] == "openai-batch" and executed["batches_pending"] == 1
        landed = metadata_of(first, "vector_index")
        assert landed["documents_landed"] == 0 and landed["documents_failed"] == 0
        assert landed["documents_awaiting"] == 3
        idle = tick(workspace, instance)  # the briefs' sensor: not its batch
        assert "no provider batch in flight" in idle.skip_reason.skip_message
        collections = ("collection_provider_batches_sensor", "inference")
        waiting = tick(workspace, instance, *collections)
        assert not waiting.run_requests and "still running" in waiting.skip_reason.skip_message

        batch_api.hold, batch_api.polls_to_finish = False, 1
        (request,) = tick(workspace, instance, *collections).run_requests
        assert request.partition_key == "handbook" and request.tags[SUBMITTED_BY] == first.run_id
        second = materialize(workspace, instance, STAGE_ASSETS, tags=request.tags)
        assert second.success
        assert metadata_of(second, "vector_index")["documents_landed"] == 3
        assert len(batch_api.created) == 1  # collected, never sent again
        idle = tick(workspace, instance, *collections)
        assert "no provider batch in flight" in idle.skip_reason.skip_message


def test_a_batch_api_embedder_without_an_address_fails_at_load_naming_the_field(workspace):
    from resources.inference import InferenceResource

    @dg.asset
    def needs_inference(inference: InferenceResource) -> None:
        """Asks for the resource."""

    for settings, field in (
        ({"executor": "openai-batch"}, "api_base"),
        ({"executor": "openai-batch", "api_base": "http://x/v1", "dtype": "float16"}, "dtype"),
    ):
        with pytest.raises(dg.DagsterResourceFunctionError) as raised:
            dg.materialize(
                [needs_inference], resources={"inference": InferenceResource(**settings)}
            )
        assert f"InferenceResource.{field}" in str(raised.value.__cause__)


def test_the_shipped_sensor_reaches_the_provider_the_environment_names(
    workspace, batch_api, monkeypatch
):
    """The shipped definitions build the generation resource from BATCH_PIPELINE_GENERATION_*
    (the runs and the sensor share it): with nothing in the code changed, the sensor asks the
    emulator about the batch; an api_base with credentials is never shown whole."""
    from batch_pipeline.definitions import build_definitions

    batch_api.hold = True
    with dg.instance_for_test() as instance:
        assert materialize(workspace, instance, [*STAGE_ASSETS, *BRIEF_ASSETS]).success
        for field, value in (
            ("EXECUTOR", "openai-batch"),
            ("API_BASE", batch_api.url),
            ("API_KEY_ENV", KEY_ENV),
        ):
            monkeypatch.setenv(f"BATCH_PIPELINE_GENERATION_{field}", value)
        shipped = build_definitions(workspace["config"])
        sensor = shipped.get_sensor_def("provider_batches_sensor")
        generation = shipped.resources["generation"]

        def tick_shipped():  # noqa: ANN202
            resources = {"pipeline": workspace["resources"]["pipeline"], "generation": generation}
            with dg.build_sensor_context(instance=instance, resources=resources) as context:
                return sensor(context)

        assert "still running" in tick_shipped().skip_reason.skip_message  # it asked
        dead = "http://gwuser:GWPASSWORD9@127.0.0.1:9/v1?api-key=QUERYSECRET7"
        monkeypatch.setenv("BATCH_PIPELINE_GENERATION_API_BASE", dead)
        said = tick_shipped().skip_reason.skip_message
        assert "Batch API unavailable" in said and "gwuser:***@127.0.0.1:9" in said
        assert "GWPASSWORD9" not in said and "QUERYSECRET7" not in said


def test_a_number_in_the_environment_that_is_none_fails_at_load_naming_it(monkeypatch):
    from batch_pipeline.config import ConfigError
    from resources.batch_api import from_environment
    from resources.generation import GenerationResource

    monkeypatch.setenv("BATCH_PIPELINE_GENERATION_BATCH_WAIT_SECONDS", "ten")
    with pytest.raises(ConfigError, match=r"\$BATCH_PIPELINE_GENERATION_BATCH_WAIT_SECONDS"):
        from_environment(GenerationResource, "GENERATION")


def test_the_brief_job_the_sensor_starts_lists_the_source_before_it_lands(workspace, batch_api):
    """The sensor's run of brief_job collects afresh: a document added while the batch ran
    is planned and submitted by that run, where it briefed the days-old listing before."""
    from assets.document_briefs import BRIEF_JOB
    from batch_pipeline.definitions import build_definitions

    job = build_definitions(workspace["config"]).resolve_job_def(BRIEF_JOB)
    selected = sorted(k.to_user_string() for k in job.asset_layer.executable_asset_keys)
    assert "source_documents" in selected
    batch_api.hold = True
    with dg.instance_for_test() as instance:
        first = materialize(workspace, instance, [*STAGE_ASSETS, *BRIEF_ASSETS])
        assert metadata_of(first, "brief_generations")["batches_pending"] == 1
        (workspace["root"] / "docs" / "late.md").write_text("# Late\n\nAdded while it ran.\n")
        batch_api.hold, batch_api.polls_to_finish = False, 1
        (request,) = tick(workspace, instance).run_requests
        second = materialize(workspace, instance, selected, tags=request.tags)
        assert second.success
        generated = metadata_of(second, "brief_generations")
        assert generated["batches_submitted"] == 1  # the late document, listed by this run
        assert len(batch_api.created) == 2 and len(batch_api.created[1]) == 1
        assert metadata_of(second, "document_briefs")["briefs_landed"] == 4
