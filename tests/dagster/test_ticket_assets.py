"""The ticket intent product in Dagster: daily partitions, the five assets, the checks and the
01:00 schedule that targets yesterday in the configured time zone."""

import shutil
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import dagster as dg
from dagster_aws.s3 import S3Resource

from batch_pipeline.definitions import build_definitions
from batch_pipeline.tickets import TICKET_STAGES
from resources import InferenceResource, PipelineResource
from tests.support import figure, metadata_values

REPO = Path(__file__).resolve().parents[2]


def ticket_workspace(root: Path, timezone: str = "UTC") -> Path:
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("# A\n\nSome text.\n")
    shutil.copytree(REPO / "data" / "tickets", root / "exports")
    shutil.copy(REPO / "data" / "intent_taxonomy.yaml", root / "taxonomy.yaml")
    lines = (REPO / "data" / "tickets_eval.jsonl").read_text().splitlines()[:60]
    (root / "eval.jsonl").write_text("\n".join(lines) + "\n")
    config = root / "pipeline.yaml"
    config.write_text(
        f"""collections:
  - name: handbook
    source: {{kind: filesystem, path: docs}}
tickets:
  source: {{kind: filesystem, path: exports}}
  taxonomy: taxonomy.yaml
  evaluation: {{path: eval.jsonl}}
  start_date: "2026-11-23"
  timezone: {timezone}
"""
    )
    return config


def asset_resources(config: Path, home: Path) -> dict[str, object]:
    """What the ticket assets run with: the pipeline, the real model on CPU, an S3 client."""
    return {
        "pipeline": PipelineResource(config_path=str(config), home=str(home)),
        "inference": InferenceResource(device="cpu"),
        "s3": S3Resource(),
    }


def materialised_day(config: Path, home: Path, day: str = "2026-11-29"):  # noqa: ANN201
    """The five ticket assets materialised for `day`: the result (a success) and the assets."""
    defs = build_definitions(config)
    assets = [defs.get_assets_def(stage.asset) for stage in TICKET_STAGES]
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            assets, partition_key=day, instance=instance, resources=asset_resources(config, home)
        )
    assert result.success
    return result, assets


def test_the_daily_schedule_targets_yesterday_in_the_configured_time_zone(tmp_path):
    config = ticket_workspace(tmp_path, timezone="America/New_York")
    defs = build_definitions(config)
    schedule = defs.get_schedule_def("ticket_intents_daily")
    assert schedule.cron_schedule == "0 1 * * *"
    assert schedule.execution_timezone == "America/New_York"
    # 01:00 in New York on the 30th is 06:00 UTC: yesterday there is the 29th
    at = datetime(2026, 11, 30, 1, 0, tzinfo=ZoneInfo("America/New_York"))
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=at)
        (request,) = schedule.evaluate_tick(context).run_requests
    assert request.partition_key == "2026-11-29"
    partitions = defs.get_assets_def("ticket_intents").partitions_def
    assert partitions.timezone == "America/New_York"
    assert partitions.get_first_partition_key() == "2026-11-23"


def test_a_day_materialises_with_its_intent_mix_and_checks(tmp_path):
    config = ticket_workspace(tmp_path)
    result, assets = materialised_day(config, tmp_path / "home")
    assert {a.group_names_by_key[a.key] for a in assets} == {"ticket_intents"}
    (event,) = result.asset_materializations_for_node("ticket_intents")
    meta = metadata_values(event.metadata)
    # the mix is one table, not a chart per intent
    assert not [
        k for k in meta if k.startswith("intent_") and k not in ("intent_mix", "intent_mix_shift")
    ]
    mix = [record.data for record in meta["intent_mix"].records]
    assert len(mix) == 16  # 15 intents and unknown, zeros included
    assert sum(row["tickets"] for row in mix) == meta["tickets_classified"] == 309
    assert [row["tickets"] for row in mix] == sorted((row["tickets"] for row in mix), reverse=True)
    assert meta["tickets_failed"] == 3
    assert 0 <= meta["unknown_rate"] < 0.1 and meta["mean_confidence"] > 0.5
    assert meta["review_decision"] == "promoted"
    assert "generation_generation" not in meta and "review_generation" not in meta
    assert not any(key.startswith("documents_") for key in meta)  # tickets, in tickets
    assert meta["tickets_attempted"] == 312 and "model_fingerprint:" in meta["fingerprints"]
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["day_complete"].passed
    assert checks["no_mass_deletion_held"].passed  # a first day removes nothing
    assert checks["intent_mix_shift"].passed  # no trailing days yet: nothing to compare
    assert checks["intent_mix_shift"].severity == dg.AssetCheckSeverity.WARN
    exports = result.asset_materializations_for_node("ticket_exports")[0].metadata
    assert figure(exports["failed_duplicate_id"].value) == 1


def test_the_export_sensor_launches_a_day_whose_export_arrived_late(tmp_path):
    """A day's export arrives after the 01:00 schedule (whose run failed): the export sensor
    asks for that day's partition, with a run key per file version, unless a run of that day
    is in flight. A SQL export's sensor, too, names no S3 resource."""
    import os
    from datetime import timedelta

    from dagster._core.test_utils import create_run_for_test

    config = ticket_workspace(tmp_path)
    late = (datetime.now(ZoneInfo("UTC")).date() - timedelta(days=2)).isoformat()
    sample = (REPO / "data" / "tickets" / "2026-11-29.jsonl").read_text()
    (tmp_path / "exports" / f"{late}.jsonl").write_text(sample)  # arrives now; never ran
    mtime = os.stat(tmp_path / "exports" / f"{late}.jsonl").st_mtime
    resources = {"pipeline": PipelineResource(config_path=str(config), home=str(tmp_path / "home"))}
    with dg.instance_for_test() as instance:  # definitions resolve against an instance
        sensor = build_definitions(config).get_sensor_def("ticket_exports_sensor")
        assert sensor.required_resource_keys == {"pipeline"}  # a folder export: no S3 client

        def tick():  # noqa: ANN202
            with dg.build_sensor_context(instance=instance, resources=resources) as context:
                return {(r.partition_key, r.run_key) for r in sensor(context).run_requests}

        assert (late, f"{late}@{mtime:.3f}") in tick()
        create_run_for_test(
            instance,
            job_name="ticket_intents_job",
            status=dg.DagsterRunStatus.STARTED,
            tags={"dagster/partition": late},
        )
        assert late not in {day for day, _ in tick()}  # its run is in flight

    text = config.read_text().replace(
        "{kind: filesystem, path: exports}",
        f"{{kind: sql, url: 'sqlite:///{tmp_path / 't.db'}', table: tickets}}",
    )
    config.write_text(text)
    with dg.instance_for_test() as instance:
        sql_sensor = build_definitions(config).get_sensor_def("ticket_exports_sensor")
        assert sql_sensor.required_resource_keys == {"pipeline"}
        with dg.build_sensor_context(instance=instance, resources=resources) as context:
            skipped = sql_sensor(context)  # the table is not there: the tick says so
    assert skipped.skip_reason.skip_message.startswith(
        "export unavailable: tickets.source.table: table 'tickets' does not exist"
    )


def test_a_stage_without_its_upstream_fails_once_not_retried(tmp_path):
    """Landing a day whose earlier stages never ran cannot succeed on a retry: the step fails
    at once, naming the stage to materialise first, and the retry policy is bypassed."""
    config = ticket_workspace(tmp_path)
    defs = build_definitions(config)
    resources = asset_resources(config, tmp_path / "home")
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [defs.get_assets_def("ticket_intents")],
            partition_key="2026-11-29",
            instance=instance,
            resources=resources,
            raise_on_error=False,
        )
        assert not result.success
        restarts = instance.get_records_for_run(
            result.run_id, of_type=dg.DagsterEventType.STEP_RESTARTED
        ).records
        assert restarts == []
        (failure,) = [
            e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE
        ]
        assert "ticket_exports has no materialisation for partition '2026-11-29'" in str(
            failure.event_specific_data.error
        )


def test_a_fine_tuned_day_reports_its_training_minutes_against_the_window(tmp_path):
    """`tickets.training.fine_tune` in Dagster: the inference resource embeds with the
    fine-tuned encoder (its own model fingerprint), and the asset says how long training
    took beside the nightly window."""
    config = ticket_workspace(tmp_path)
    config.write_text(
        config.read_text()
        + '  training: {start: "2026-11-23", end: "2026-11-24", '
        + "fine_tune: {steps: 2, batch_pairs: 4}}\n"
    )
    result, _ = materialised_day(config, tmp_path / "home")
    (event,) = result.asset_materializations_for_node("ticket_intents")
    meta = metadata_values(event.metadata)
    assert meta["encoder_fine_tune_minutes"] > 0 and meta["window_minutes"] == 240
    assert meta["classifier"].startswith("encoder fine-tuned (2 of 2 steps, ")
    from batch_pipeline.config import load_config
    from batch_pipeline.state.storage import resolve_storage
    from batch_pipeline.tickets.product import TicketProduct

    product = TicketProduct(load_config(config), resolve_storage(str(tmp_path / "home")))
    assert meta["model_fingerprint"] == product.classifier.model_fingerprint
    assert product.classifier.encoders.verified(product.classifier.encoder_key) is not None


def test_the_cascade_sensor_starts_the_day_that_collects_the_providers_answers(
    tmp_path, batch_api, monkeypatch
):
    """A cascade through a provider (the LOOPBACK EMULATOR of the Batch API, whose "model" is
    the STAND-IN answering from the labels): the day's run submits and returns; the sensor
    skips while the provider holds the batches, then starts one run of the day, which
    collects the held-out texts' answers, chooses the threshold and submits the day's least
    sure tickets; once those are back, the sensor starts the run that lands their answers."""
    import json

    from batch_pipeline.config.taxonomy import load_taxonomy
    from batch_pipeline.tickets.prepare import ticket_text
    from tests.engine.test_cascade_product import LabelAnswering

    config = ticket_workspace(tmp_path)
    monkeypatch.setenv("BP_TEST_CASCADE_KEY", batch_api.api_key)
    config.write_text(
        config.read_text()
        + '  training: {start: "2026-11-23", end: "2026-11-26"}\n'
        + "  cascade: {target_accuracy: 0.98, delta: 0.2, executor: openai-batch, batch_api: "
        + f"{{api_base: '{batch_api.url}', api_key_env: BP_TEST_CASCADE_KEY, wait_seconds: 0}}}}\n"
    )
    taxonomy = load_taxonomy(tmp_path / "taxonomy.yaml")
    labels = {e: i.name for i in taxonomy.intents for e in i.examples}
    for export in sorted((tmp_path / "exports").glob("*.jsonl")):
        for line in export.read_text().splitlines():
            ticket = json.loads(line)
            if ticket.get("label") and ticket.get("body"):
                labels[ticket_text(ticket.get("subject"), ticket["body"])] = ticket["label"]
    batch_api._fake = LabelAnswering(labels)
    batch_api.polls_to_finish = 1
    home, day = tmp_path / "home", "2026-11-29"
    defs = build_definitions(config)
    assets = [defs.get_assets_def(stage.asset) for stage in TICKET_STAGES]
    sensor = defs.get_sensor_def("ticket_cascade_batches_sensor")
    resources = asset_resources(config, home)

    def run_day(**tags: str) -> dict:
        result = dg.materialize(
            assets, partition_key=day, instance=instance, resources=resources, tags=tags
        )
        assert result.success
        (event,) = result.asset_materializations_for_node("ticket_intents")
        return metadata_values(event.metadata)

    def tick():  # noqa: ANN202
        with dg.build_sensor_context(
            instance=instance, resources={"pipeline": resources["pipeline"]}
        ) as context:
            return sensor(context)

    with dg.instance_for_test() as instance:
        batch_api.hold = True  # the provider's slow night
        first = run_day()
        assert first["tickets_answer_awaiting"] == first["tickets_classified"] > 0
        waiting = tick()
        assert not waiting.run_requests and "still running" in waiting.skip_reason.skip_message

        batch_api.hold = False
        (request,) = tick().run_requests
        assert request.partition_key == day and "held-out/cascade" in request.run_key
        assert tick().run_requests[0].run_key == request.run_key  # one run however many ticks
        batch_api.hold = True  # the day's least sure tickets wait in their turn
        second = run_day(**request.tags)
        assert "cascade to SmolLM2-135M-Instruct under confidence" in second["classifier"]
        asked = second["tickets_answer_awaiting"]  # sent, not answered yet
        assert 0 < asked < second["tickets_classified"] and second["tickets_chat_answered"] == 0
        assert "still running" in tick().skip_reason.skip_message

        batch_api.hold = False
        (request,) = tick().run_requests
        assert request.partition_key == day and request.run_key.startswith("cascade-batches:")
        third = run_day(**request.tags)
        assert third["tickets_answer_awaiting"] == 0
        assert third["tickets_escalated"] == third["tickets_chat_answered"] == asked
        assert "no cascade batch in flight" in tick().skip_reason.skip_message
