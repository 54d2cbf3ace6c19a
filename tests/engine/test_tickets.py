"""The ticket intent product on real parts: the real model, LanceDB, SQLite and PostgreSQL.

Each behaviour is run with the folder export and with the SQL table export (SQLite and
PostgreSQL). Days are small (a dozen tickets) so the real model is cheap.
"""

import json
import random
import shutil
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.generations.registry import GenerationRegistry
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.tickets.product import TicketProduct

REPO = Path(__file__).resolve().parents[2]
DAY = "2026-11-29"
EVAL_TICKETS = 120  # of the sample's labelled set: enough for the gate to tell taxonomies apart


def sample_tickets(day: str, count: int = 12) -> list[dict]:
    """The sample export's first `count` good tickets of `day`."""
    rows = [json.loads(line) for line in (REPO / "data" / "tickets" / f"{day}.jsonl").open()]
    good = [r for r in rows if r.get("body") and r["created_at"].startswith(day)]
    return good[:count]


class TicketWorkspace:
    """A config with a `tickets:` section over a folder or a SQL table, and a home."""

    def __init__(self, root: Path, kind: str, sql_url: str | None = None) -> None:
        self.root = root
        self.kind = kind
        self.sql_url = sql_url
        self.taxonomy = root / "taxonomy.yaml"
        shutil.copy(REPO / "data" / "intent_taxonomy.yaml", self.taxonomy)
        labelled = (REPO / "data" / "tickets_eval.jsonl").read_text().splitlines()
        (root / "eval.jsonl").write_text("\n".join(labelled[:EVAL_TICKETS]) + "\n")
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / "a.md").write_text("# A\n\nSome text.\n")
        self.days: dict[str, list[dict]] = {}
        if kind == "folder":
            (root / "exports").mkdir()
            source = "{kind: filesystem, path: exports}"
        else:
            self.table = f"tickets_{random.randrange(16**8):08x}"
            engine = sa.create_engine(sql_url)
            self.sql_table = sa.Table(
                self.table,
                sa.MetaData(),
                sa.Column("id", sa.Text, primary_key=True),
                sa.Column("created_at", sa.DateTime(timezone=True)),
                sa.Column("subject", sa.Text),
                sa.Column("body", sa.Text),
                sa.Column("channel", sa.Text),
            )
            self.sql_table.create(engine)
            self.engine = engine
            source = f"{{kind: sql, url: '{sql_url}', table: {self.table}}}"
        self.config = root / "pipeline.yaml"
        self.config.write_text(
            f"""collections:
  - name: handbook
    source: {{kind: filesystem, path: docs}}
tickets:
  source: {source}
  taxonomy: taxonomy.yaml
  evaluation: {{path: eval.jsonl, tolerance: 0.02, min_accuracy: 0.6}}
  start_date: "2026-11-20"
"""
        )
        self.home = root / "home"

    def write_day(self, day: str, tickets: list[dict]) -> None:
        self.days[day] = tickets
        if self.kind == "folder":
            lines = [json.dumps(t) for t in tickets]
            (self.root / "exports" / f"{day}.jsonl").write_text("\n".join(lines) + "\n")
            return
        with self.engine.begin() as conn:
            conn.execute(self.sql_table.delete().where(self.sql_table.c.id.startswith(f"{day}:")))
            for t in tickets:
                created = datetime.fromisoformat(t["created_at"].replace("Z", "+00:00"))
                conn.execute(
                    self.sql_table.insert().values(
                        id=f"{day}:{t['id']}",
                        created_at=created.astimezone(UTC),
                        subject=t.get("subject"),
                        body=t.get("body"),
                        channel=t.get("channel"),
                    )
                )

    def product(self) -> TicketProduct:
        return TicketProduct(load_config(self.config), resolve_storage(str(self.home)))

    def close(self) -> None:
        if self.kind != "folder":
            self.sql_table.drop(self.engine)
            self.engine.dispose()


@pytest.fixture(params=["folder", "sqlite", "postgresql"])
def tickets(request, tmp_path):
    from tests.support import POSTGRES_URL

    url = {"sqlite": f"sqlite:///{tmp_path / 'tickets.db'}", "postgresql": POSTGRES_URL}.get(
        request.param
    )
    workspace = TicketWorkspace(tmp_path, "folder" if url is None else "sql", url)
    workspace.write_day(DAY, sample_tickets(DAY))
    yield workspace
    workspace.close()


def run_day(product: TicketProduct, runner, day: str = DAY, run_id: str = "r1"):  # noqa: ANN001, ANN201
    out = product.day(day).run(run_id, runner)
    return out["land"].summary, out


def embedder_for(runner):  # noqa: ANN001, ANN201
    return lambda model: runner


def test_a_day_lands_every_ticket_with_lineage_and_a_replay_changes_nothing(tickets, runner):
    product = tickets.product()
    landed, stages = run_day(product, runner)
    assert landed.tickets_classified == 12 and landed.committed
    # prepare's token ids are padded by execute, not tokenised again
    assert stages["execute"].stats.inputs == 12 and stages["execute"].stats.tokenized == 0
    rows = product.intents.day_rows(product.index, DAY).to_pylist()
    assert len(rows) == 12
    row = rows[0]
    assert row["model_fingerprint"] == product.classifier.model_fingerprint
    assert row["taxonomy_version"] == product.taxonomy.version
    assert row["run_id"] == "r1" and row["day"] == DAY
    assert len(row["top_intents"]) == 3 and row["top_scores"][0] == pytest.approx(row["confidence"])
    version = product.store.open(product.index).version

    replay, stages = run_day(product, runner, run_id="r2")
    assert stages["execute"].stats.inputs == 0  # nothing embedded again
    assert not replay.committed and replay.tickets_classified == 0
    assert product.store.open(product.index).version == version
    assert product.intents.day_rows(product.index, DAY)["run_id"].to_pylist() == ["r1"] * 12


def test_a_day_s_run_records_what_it_counted_in_tickets(tickets, runner):
    """The run frame records a ticket run in tickets: its own counts, its unit, and no
    ticket count in the document and chunk columns older versions read."""
    from batch_pipeline.tickets.arrivals import tickets_read

    product = tickets.product()
    run_day(product, runner)
    run_day(tickets.product(), runner, run_id="r2")  # a replay: every ticket unchanged
    replay, first = product.tracking.partition_runs([DAY], 5, product.index)
    assert first["unit"] == replay["unit"] == "tickets"
    assert first["counts"] == {
        "tickets_read": 12,
        "tickets_valid": 12,
        "tickets_classified": 12,
        "tickets_unchanged": 0,
        "tickets_removed": 0,
        "tickets_failed": 0,
    }
    assert replay["counts"]["tickets_unchanged"] == 12
    assert replay["counts"]["tickets_classified"] == 0
    assert first["attempted"] == 12 and first["failed"] == 0 and first["inputs"] == 12
    assert first["docs_landed"] == first["chunks_embedded"] == first["chunks_reused"] == 0
    assert tickets_read(replay) == 12  # what the export sensor compares a table's rows with


def test_a_ticket_added_to_a_classified_day_is_the_only_one_classified(tickets, runner):
    product = tickets.product()
    run_day(product, runner)
    added = {
        "id": "NEW-1",
        "created_at": f"{DAY}T12:00:00Z",
        "subject": "Charged twice",
        "body": "I was charged twice this month for the Team plan.",
        "channel": "email",
    }
    tickets.write_day(DAY, [*tickets.days[DAY], added])
    landed, stages = run_day(tickets.product(), runner, run_id="r2")
    assert stages["execute"].stats.inputs == 1
    assert landed.tickets_classified == 1 and landed.tickets_unchanged == 12
    rows = {r["ticket_id"]: r for r in product.intents.day_rows(product.index, DAY).to_pylist()}
    new_id = "NEW-1" if tickets.kind == "folder" else f"{DAY}:NEW-1"
    assert rows[new_id]["run_id"] == "r2" and rows[new_id]["intent"] == "duplicate_charge"
    assert {r["run_id"] for k, r in rows.items() if k != new_id} == {"r1"}


def test_bad_rows_are_recorded_with_their_reason_and_the_day_still_lands(tickets, runner):
    good = tickets.days[DAY]
    bad = [
        {**good[0], "body": ""},  # a repeated id, and no body
        {"id": "X-2", "created_at": f"{DAY}T10:00:00Z", "subject": "hi", "body": None},
    ]
    if tickets.kind == "folder":  # a SQL column cannot hold an unparseable date or a repeat
        bad.append({"id": "X-3", "created_at": "yesterday", "subject": "s", "body": "b"})
        bad.append({**good[1]})
        tickets.write_day(DAY, [*good, *bad])
        (tickets.root / "exports" / f"{DAY}.jsonl").open("a").write("{not json\n")
    else:
        tickets.write_day(DAY, [*good, bad[1]])
    product = tickets.product()
    landed, _ = run_day(product, runner)
    assert landed.mix.total == 12
    reasons = {
        f["doc_id"]: f["reason"] for f in product.tracking.list_failures(index=product.index)
    }
    if tickets.kind == "folder":
        assert sorted(reasons.values()) == sorted(
            ["duplicate_id", "duplicate_id", "missing_body", "invalid_date", "invalid_json"]
        )
        assert reasons[f"{DAY}/X-3"] == "invalid_date"
    else:
        assert reasons == {f"{DAY}/{DAY}:X-2": "missing_body"}
    # fixed at the source, the failure is gone on the next run
    tickets.write_day(DAY, good)
    run_day(tickets.product(), runner, run_id="r2")
    assert product.tracking.list_failures(index=product.index) == []


def test_a_taxonomy_edit_builds_a_gated_generation_beside_the_live_one(tickets, runner):
    product = tickets.product()
    run_day(product, runner)
    first = product.review(embedder_for(runner))
    assert first.decision == "promoted" and first.scores["candidate"]["accuracy"] >= 0.85
    live_rows = product.intents.day_rows(product.index, DAY).to_pylist()

    text = tickets.taxonomy.read_text().replace(
        "The customer was billed twice", "The customer was charged two times"
    )
    tickets.taxonomy.write_text(text)
    edited = tickets.product()
    assert edited.index != product.index
    landed, stages = run_day(edited, runner, run_id="r2")
    assert stages["execute"].stats.inputs == 0  # same model: vectors reused, only re-scored
    assert landed.tickets_classified == 12
    assert {
        r["taxonomy_version"] for r in edited.intents.day_rows(edited.index, DAY).to_pylist()
    } == {edited.taxonomy.version}
    assert product.intents.day_rows(product.index, DAY).to_pylist() == live_rows  # untouched
    review = edited.review(embedder_for(runner))
    assert review.decision == "promoted"  # complete and no worse than live
    assert GenerationRegistry(edited.tracking).live("tickets").index_name == edited.index
    back = GenerationRegistry(edited.tracking).rollback("tickets")
    assert back.live == product.index


def test_the_gate_refuses_a_taxonomy_whose_descriptions_are_shuffled(tickets, runner):
    product = tickets.product()
    run_day(product, runner)
    assert product.review(embedder_for(runner)).decision == "promoted"
    data = yaml.safe_load(tickets.taxonomy.read_text())
    names = list(data["intents"])
    descriptions = [data["intents"][n]["description"] for n in names]
    rotated = descriptions[1:] + descriptions[:1]  # every intent gets another's description
    for name, description in zip(names, rotated, strict=True):
        data["intents"][name]["description"] = description
    tickets.taxonomy.write_text(yaml.safe_dump(data))
    shuffled = tickets.product()
    run_day(shuffled, runner, run_id="r2")
    review = shuffled.review(embedder_for(runner))
    assert review.decision == "refused", review.reason
    assert "worse than live" in review.reason or "min_accuracy" in review.reason
    # clearly worse, though the trained head weighs a description as one example of many
    assert review.scores["candidate"]["accuracy"] < review.scores["live"]["accuracy"] - 0.05
    assert GenerationRegistry(shuffled.tracking).live("tickets").index_name == product.index


def test_a_new_generation_is_not_promoted_until_it_holds_every_live_day(tmp_path, runner):
    workspace = TicketWorkspace(tmp_path, "folder")
    workspace.write_day("2026-11-28", sample_tickets("2026-11-28", 6))
    workspace.write_day(DAY, sample_tickets(DAY, 6))
    product = workspace.product()
    run_day(product, runner, "2026-11-28")
    run_day(product, runner, DAY, run_id="r2")
    assert product.review(embedder_for(runner)).decision == "promoted"
    workspace.taxonomy.write_text(workspace.taxonomy.read_text() + "\n# edited\n")
    edited = workspace.product()
    run_day(edited, runner, DAY, run_id="r3")
    review = edited.review(embedder_for(runner))
    assert review.decision == "refused" and "backfill 2026-11-28" in review.reason
    run_day(edited, runner, "2026-11-28", run_id="r4")
    assert edited.review(embedder_for(runner)).decision == "promoted"


def test_a_missing_export_fails_the_day_and_lands_nothing(tmp_path, runner):
    workspace = TicketWorkspace(tmp_path, "folder")
    product = workspace.product()
    with pytest.raises(Exception, match="no ticket export for 2026-11-27"):
        run_day(product, runner, "2026-11-27")
    assert not product.store.has_table(product.index)


def test_bad_ticket_settings_fail_at_load_and_name_the_field(tmp_path):
    workspace = TicketWorkspace(tmp_path, "folder")
    text = workspace.config.read_text()
    workspace.config.write_text(text.replace("taxonomy: taxonomy.yaml", "taxonomy: missing.yaml"))
    with pytest.raises(ConfigError, match=r"tickets.taxonomy: file not found: .*missing.yaml"):
        load_config(workspace.config)
    workspace.taxonomy.write_text("intents:\n  only_one: {description: x}\n")
    workspace.config.write_text(text)
    with pytest.raises(ConfigError, match="at least two intents"):
        load_config(workspace.config)
    workspace.config.write_text(text.replace('"2026-11-20"', '"yesterday"'))
    with pytest.raises(ConfigError, match="tickets.start_date: 'yesterday' is not a date"):
        load_config(workspace.config)
    # one name per product: the ticket intents cannot take a collection's
    shutil.copy(REPO / "data" / "intent_taxonomy.yaml", workspace.taxonomy)
    workspace.config.write_text(text.replace("tickets:\n", "tickets:\n  name: handbook\n"))
    with pytest.raises(ConfigError, match="collections, tickets: 'handbook' would name a produc"):
        load_config(workspace.config)
    for training, message in (
        ('{start: "2026-11-23"}', "tickets.training: .*give both start and end"),
        ('{start: "2026-11-23", end: "2026-11-01"}', "end 2026-11-01 is before start"),
        ('{start: "soon", end: "2026-11-01"}', "tickets.training.start: 'soon' is not a date"),
        ("{target_precision: 2}", "tickets.training.target_precision"),
    ):
        workspace.config.write_text(text + f"  training: {training}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(workspace.config)
    workspace.config.write_text(text + "  classifier: svm\n")
    with pytest.raises(ConfigError, match="tickets.classifier"):
        load_config(workspace.config)


def test_a_missing_ticket_table_or_column_names_the_setting(tmp_path):
    """A SQL export is checked like a SQL document source: the setting that names a missing
    table or column, and the columns there are."""
    from batch_pipeline.config import TicketSqlExport
    from batch_pipeline.tickets.exports import make_export

    url = f"sqlite:///{tmp_path / 'tickets.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE tickets (id TEXT, created_at TEXT, body TEXT)"))

    def export(**columns: str | None):  # noqa: ANN202
        config = TicketSqlExport(kind="sql", url=url, channel_column=None, **columns)
        return make_export(config, "UTC")

    export(table="tickets", subject_column=None).check()  # every configured column is there
    with pytest.raises(SourceUnavailableError, match=r"^tickets\.source\.table: table 'nope' "):
        export(table="nope").check()
    with pytest.raises(SourceUnavailableError) as raised:
        export(table="tickets").check()  # subject_column defaults to "subject"
    assert str(raised.value) == (
        f"tickets.source.subject_column: sqlite:///{tmp_path / 'tickets.db'} tickets has no "
        "column 'subject'; it has body, created_at, id"
    )
    unset = TicketSqlExport(kind="sql", url_env="NO_SUCH_TICKETS_URL", table="tickets")
    with pytest.raises(
        ConfigError, match="^tickets.source.url_env: environment variable NO_SUCH_TICKETS_URL "
    ):
        unset.resolved_url()


def test_an_s3_export_lands_a_day_and_a_missing_bucket_fails_naming_the_field(
    tmp_path, runner, s3_bucket, moto_server
):
    client, bucket = s3_bucket
    tickets = sample_tickets(DAY, 8)
    body = "\n".join(json.dumps(t) for t in tickets) + "\n{broken\n"
    client.put_object(Bucket=bucket, Key=f"exports/{DAY}.jsonl", Body=body.encode())
    workspace = TicketWorkspace(tmp_path, "folder")
    source = (
        f"{{kind: s3, bucket: {bucket}, prefix: exports/, endpoint_url: '{moto_server}', "
        "region: us-east-1}"
    )
    text = workspace.config.read_text().replace("{kind: filesystem, path: exports}", source)
    workspace.config.write_text(text)
    product = workspace.product()
    landed, _ = run_day(product, runner)
    assert landed.mix.total == 8
    assert [f.reason for f in landed.failures] == ["invalid_json"]
    assert product.export.has_day(date(2026, 11, 29)) and not product.export.has_day(
        date(2026, 11, 28)
    )
    with pytest.raises(Exception, match="no ticket export for 2026-11-28"):
        run_day(product, runner, "2026-11-28", run_id="r2")
    workspace.config.write_text(text.replace(bucket, "no-such-bucket-here"))
    with pytest.raises(
        SourceUnavailableError, match="tickets.source.bucket: bucket 'no-such-bucket-here'"
    ):
        run_day(workspace.product(), runner, run_id="r3")


def test_report_and_failures_cover_the_ticket_product(tmp_path, runner, capsys):
    from batch_pipeline import cli

    workspace = TicketWorkspace(tmp_path, "folder")
    good = sample_tickets(DAY, 6)
    workspace.write_day(DAY, [*good, {**good[0], "body": ""}])
    run_day(workspace.product(), runner)
    base = ["--config", str(workspace.config), "--home", str(workspace.home)]
    assert cli.main([*base, "report", "--collection", "tickets", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (line,) = report["runs"]
    assert line["partition"] == DAY and line["inputs"] == 6
    assert line["unit"] == "tickets" and line["failed"] == 1 and line["attempted"] == 7
    assert cli.main([*base, "report", "--product", "tickets"]) == 0
    assert "1/7 tickets" in capsys.readouterr().out
    assert cli.main([*base, "failures", "--collection", "tickets", "--json"]) == 0
    (failure,) = json.loads(capsys.readouterr().out)
    assert failure["collection"] == "tickets" and failure["reason"] == "duplicate_id"
    assert failure["doc_id"] == f"{DAY}/{good[0]['id']}"


def test_status_and_doctor_cover_the_ticket_product(tmp_path, runner, capsys):
    """`status` and `doctor` show the ticket product beside the collections: days classified
    against the days due, the latest day, failing rows, the generation; `doctor` names the
    days still to classify and exits 1 while any is missing."""
    from datetime import timedelta

    from batch_pipeline import cli

    workspace = TicketWorkspace(tmp_path, "folder")
    good = sample_tickets(DAY, 6)
    workspace.write_day(DAY, [*good, {**good[0], "body": ""}])
    base = ["--config", str(workspace.config), "--home", str(workspace.home)]
    due = (date.today() - timedelta(days=1) - date(2026, 11, 20)).days + 1

    assert cli.main([*base, "doctor", "--collection", "tickets"]) == 1  # nothing classified
    assert "no live generation yet" in capsys.readouterr().out

    product = workspace.product()
    run_day(product, runner)
    assert product.review(embedder_for(runner)).decision == "promoted"
    assert cli.main([*base, "status", "--collection", "tickets", "--json"]) == 0
    (status,) = json.loads(capsys.readouterr().out)
    assert status["kind"] == "ticket_intents" and status["generation_state"] == "live"
    assert (status["days_due"], status["days_classified"]) == (due, 1)
    assert DAY not in status["missing_days"] and len(status["missing_days"]) == due - 1
    assert (status["tickets"], status["latest_day"], status["latest_day_tickets"]) == (6, DAY, 6)
    assert status["failing_tickets"] == 1 and status["last_run_id"] == "r1"

    assert cli.main([*base, "status"]) == 0  # every collection, then the ticket product
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("COLLECTION")
    assert f"tickets (ticket intents): 1 of {due} days classified since 2026-11-20" in out
    assert f"latest day {DAY}: 6 tickets, unknown rate" in out

    assert cli.main([*base, "doctor", "--json"]) == 1
    handbook, tickets = json.loads(capsys.readouterr().out)
    assert handbook["product"] == "handbook" and tickets["product"] == "tickets"
    assert (handbook["kind"], tickets["kind"]) == ("vector_index", "ticket_intents")
    assert tickets["table_rows"] == 6 and not tickets["healthy"]
    (problem,) = tickets["problems"]
    assert problem.startswith(f"{due - 1} of {due} due days not classified under the live")
    assert "2026-11-20, 2026-11-21, 2026-11-22, 2026-11-23, 2026-11-24 and" in problem


def test_a_late_or_replaced_export_is_found_after_the_schedule_not_before(tmp_path, runner):
    """The export sensor's decision, with the time handed in: a day whose file arrived after
    the schedule (01:00) and never ran; nothing before the schedule's time, nor once the day
    ran; again when the file is replaced after the run started."""
    import os
    import time

    from batch_pipeline.tickets.arrivals import day_arrivals, day_states, skip_reason

    workspace = TicketWorkspace(tmp_path, "folder")
    workspace.write_day(DAY, sample_tickets(DAY, 6))
    export = tmp_path / "exports" / f"{DAY}.jsonl"
    arrived = datetime(2026, 11, 30, 3, 0, tzinfo=UTC).timestamp()  # two hours late
    os.utime(export, (arrived, arrived))
    product = workspace.product()

    assert day_arrivals(product, datetime(2026, 11, 30, 0, 30, tzinfo=UTC)) == []  # not yet due
    # the schedule's own run starts at 01:00: the day is the sensor's ten minutes later
    assert day_arrivals(product, datetime(2026, 11, 30, 1, 5, tzinfo=UTC)) == []
    at = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
    (late,) = day_arrivals(product, at)
    assert (late.day, late.changed_at, late.rows, late.last_run) == (DAY, arrived, None, None)
    assert (
        late.reason == f"{DAY}: its export arrived at 03:00:00Z, after the schedule, and never ran"
    )
    assert late.run_key == f"{DAY}@{arrived:.3f}"

    run_day(product, runner)
    assert day_arrivals(product, at) == []  # the day ran after its file was written
    # the sensor's skip reason names the days in each state
    states = day_states(product, datetime(2026, 11, 30, 4, 0, tzinfo=UTC))
    assert skip_reason(states, set(), 3) == (
        "nothing to launch of the newest 3 days past the schedule: "
        "2026-11-27, 2026-11-28: no export yet; 2026-11-29: ran"
    )
    assert skip_reason(states, {"2026-11-29"}, 3).endswith("2026-11-29: running")

    replaced = time.time() + 60  # a corrected export, written after the run started
    os.utime(export, (replaced, replaced))
    (again,) = day_arrivals(product, at)
    assert again.day == DAY and again.last_run["run_id"] == "r1"
    assert again.reason.startswith(f"{DAY}: its export was replaced at ")


def test_tickets_added_to_a_sql_day_after_it_ran_are_found(tmp_path, runner):
    """A SQL export has no file time: a day past the schedule is launched when its row count
    differs from the rows its newest landed run read (a ticket written late to the table)."""
    from batch_pipeline.tickets.arrivals import day_arrivals

    workspace = TicketWorkspace(tmp_path, "sql", f"sqlite:///{tmp_path / 'tickets.db'}")
    tickets = sample_tickets(DAY, 7)
    workspace.write_day(DAY, tickets[:6])
    product = workspace.product()
    at = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
    (first,) = day_arrivals(product, at)  # the schedule's run did not happen
    assert (first.rows, first.last_run, first.changed_at) == (6, None, None)
    assert first.reason == f"{DAY}: 6 tickets in the table, and it never ran"
    assert first.run_key == f"{DAY}#6@never"

    run_day(product, runner)
    assert day_arrivals(product, at) == []  # the run read all six
    workspace.write_day(DAY, tickets)  # a seventh ticket, written late
    (late,) = day_arrivals(product, at)
    assert late.reason == f"{DAY}: 7 tickets in the table, 6 when it last ran"
    assert late.run_key == f"{DAY}#7@r1"
    workspace.close()


def test_an_empty_or_shrunken_export_does_not_empty_a_classified_day(tmp_path, runner, capsys):
    """An export truncated to 0 bytes is not arrived: the run fails and the day keeps its
    rows. One that lost more tickets than the mass-deletion limits allow keeps the lost
    tickets' rows until an operator confirms (exit 3, as for documents)."""
    from batch_pipeline import cli
    from batch_pipeline.tickets.exports import ExportMissingError

    workspace = TicketWorkspace(tmp_path, "folder")
    workspace.write_day(DAY, sample_tickets(DAY))
    product = workspace.product()
    run_day(product, runner)
    export = tmp_path / "exports" / f"{DAY}.jsonl"
    export.write_bytes(b"")
    with pytest.raises(ExportMissingError, match=rf"export for {DAY} is empty \(0 bytes\)"):
        run_day(workspace.product(), runner, run_id="r2")
    assert len(product.intents.day_rows(product.index, DAY)) == 12
    assert workspace.product().export.day_changed_at(date.fromisoformat(DAY)) is None

    workspace.write_day(DAY, sample_tickets(DAY)[:2])  # 10 of 12 gone: past max_delete_fraction
    base = ["--config", str(workspace.config), "--home", str(workspace.home)]
    assert cli.main([*base, "run", "--day", DAY, "--run-id", "r3"]) == 3
    assert "held back 10 deletions" in capsys.readouterr().err
    assert len(product.intents.day_rows(product.index, DAY)) == 12
    (latest, *_) = product.tracking.partition_runs([DAY], 1, product.index)
    assert latest["deletions_held"] == 10 and latest["counts"]["tickets_removed"] == 0
    confirmed = ["run", "--day", DAY, "--run-id", "r4", "--allow-mass-delete"]
    assert cli.main([*base, *confirmed]) == 0
    assert len(product.intents.day_rows(product.index, DAY)) == 2


def test_a_line_that_is_not_utf8_is_a_failure_not_replacement_characters(tmp_path, runner):
    workspace = TicketWorkspace(tmp_path, "folder")
    good = sample_tickets(DAY, 4)
    workspace.write_day(DAY, good)
    export = tmp_path / "exports" / f"{DAY}.jsonl"
    bad = json.dumps({**good[0], "id": "LATIN-1", "body": "caf\u00e9"}).encode("utf-8")
    bad = bad.replace(b"caf\\u00e9", b"caf\xe9")  # the body written as Latin-1
    export.write_bytes(export.read_bytes() + bad + b"\n")
    product = workspace.product()
    landed, _ = run_day(product, runner)
    assert landed.mix.total == 4
    (failure,) = product.tracking.list_failures(index=product.index)
    assert failure["reason"] == "invalid_utf8" and "line 5: not UTF-8" in failure["message"]
    texts = product.intents.day_rows(product.index, DAY, ["input_text"])["input_text"]
    assert not any("\ufffd" in text for text in texts.to_pylist())


def test_every_column_of_every_stage_file_and_table_is_described(tmp_path, runner):
    """Each product's stage files and table, as a run writes them: every column has a
    description in that product's own table of descriptions."""
    from batch_pipeline.index.product import open_partition
    from batch_pipeline.stages import STAGES
    from batch_pipeline.stages.columns import COLUMN_DESCRIPTIONS
    from batch_pipeline.state.staging import parquet_file
    from batch_pipeline.tickets import TICKET_STAGES
    from batch_pipeline.tickets.columns import TICKET_COLUMN_DESCRIPTIONS

    workspace = TicketWorkspace(tmp_path, "folder")
    workspace.write_day(DAY, sample_tickets(DAY, 4))
    product = workspace.product()
    day = product.day(DAY)
    day.run("r1", runner)
    index = open_partition(
        load_config(workspace.config), resolve_storage(str(workspace.home)), "handbook"
    )
    index.run("r1", runner)
    for engine, stages, described in (
        (day, TICKET_STAGES, TICKET_COLUMN_DESCRIPTIONS),
        (index, STAGES, COLUMN_DESCRIPTIONS),
    ):
        for stage in stages[:-1]:  # the stage files; land writes the table
            names = parquet_file(engine.path("r1", stage.file)).schema_arrow.names
            assert set(names) <= set(described), (stage.asset, set(names) - set(described))
        table = engine.store.open(engine.index).schema.names
        assert set(table) <= set(described), (stages[-1].asset, set(table) - set(described))


def labelled_workspace(tmp_path: Path, days: list[str]) -> TicketWorkspace:
    """A folder workspace whose exports are the sample's whole days (their labels too), and
    whose training window is the first two."""
    workspace = TicketWorkspace(tmp_path, "folder")
    for day in days:
        rows = [json.loads(line) for line in (REPO / "data" / "tickets" / f"{day}.jsonl").open()]
        workspace.write_day(day, rows)
    text = workspace.config.read_text()
    workspace.config.write_text(text + f'  training: {{start: "{days[0]}", end: "{days[1]}"}}\n')
    return workspace


def relabel(workspace: TicketWorkspace, day: str, change) -> None:  # noqa: ANN001
    workspace.write_day(day, [change(dict(t)) for t in workspace.days[day]])


TRAINING_DAYS = ["2026-11-23", "2026-11-24", "2026-11-25"]


def test_labelled_history_trains_the_generation_and_its_hash_is_in_the_fingerprint(
    tmp_path, runner, capsys
):
    from batch_pipeline import cli

    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    product = workspace.product()
    history = product.classifier.history
    labelled = sum(  # bad rows (no body) are not training data
        1 for d in TRAINING_DAYS[:2] for t in workspace.days[d] if t.get("label") and t["body"]
    )
    assert len(history.tickets) == labelled - history.held_out > 100
    prediction = product.classify_texts([("Charged twice", "I was billed two times")], runner)
    assert prediction[0].intent == "duplicate_charge"
    trained = product.trained()
    assert trained["labelled_tickets"] == len(history.tickets)
    assert set(trained["candidates"]) == {"prototype", "logistic"}
    assert trained["classifier"] == max(trained["candidates"], key=trained["candidates"].get)
    assert trained["calibrated"] and trained["label_agreement"] > 0.8
    # the review states the share answered beside the accuracy
    run_day(product, runner, day=TRAINING_DAYS[2])
    scores = product.review(embedder_for(runner)).scores["candidate"]
    assert {"accuracy", "coverage", "answered_accuracy"} <= set(scores)
    # calibrated confidences: the temperature fitted held out, the error before and after,
    # and the review's on the labelled set (reported, not gated)
    assert trained["temperature"] > 0 and trained["ece_after"] < trained["ece_before"]
    assert scores["ece"] < scores["ece_uncalibrated"], scores
    args = ["--config", str(workspace.config), "--home", str(workspace.home)]
    assert cli.main([*args, "generations", "list", "--product", "tickets"]) == 0
    listed = capsys.readouterr().out
    assert f"classifier={trained['classifier']} (prototype " in listed
    assert "precision=faithful  promoted" in listed or "precision=faithful  live" in listed
    assert f"accuracy {scores['accuracy']:.4f}" in listed

    first = product.fingerprint
    flip = {"refund_request": "duplicate_charge"}

    def relabelled(t: dict) -> dict:  # one label changed
        if t.get("label") in flip and not relabelled.done:
            t["label"], relabelled.done = flip[t["label"]], True
        return t

    relabelled.done = False
    relabel(workspace, TRAINING_DAYS[2], relabelled)  # outside the window: the same history
    assert workspace.product().fingerprint == first
    relabelled.done = False
    relabel(workspace, TRAINING_DAYS[1], relabelled)  # inside it: a new generation
    assert workspace.product().fingerprint != first


def test_a_history_with_shuffled_labels_is_refused_and_nothing_lands(tmp_path, runner):
    from batch_pipeline.tickets.classifier.training import LabelsRefusedError

    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    rng = random.Random(3)
    for day in TRAINING_DAYS[:2]:
        labels = [t["label"] for t in workspace.days[day] if t.get("label")]
        rng.shuffle(labels)
        shuffled = iter(labels)

        def swap(t: dict, given=shuffled) -> dict:  # noqa: ANN001
            return {**t, "label": next(given)} if t.get("label") else t

        relabel(workspace, day, swap)
    product = workspace.product()
    with pytest.raises(LabelsRefusedError, match="shuffled"):
        run_day(product, runner, day=TRAINING_DAYS[2])
    assert product.store.open(product.index) is None  # nothing landed


def test_a_file_export_s_history_is_read_once_until_a_day_s_file_changes(tmp_path, monkeypatch):
    from batch_pipeline.tickets.exports import FolderExport

    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    reads: list[str] = []
    read_day = FolderExport.read_day

    def counted(self, day):  # noqa: ANN001, ANN202 - a spy on the export's reads
        reads.append(day.isoformat())
        return read_day(self, day)

    monkeypatch.setattr(FolderExport, "read_day", counted)
    first = workspace.product().classifier.history
    assert sorted(reads) == TRAINING_DAYS[:2]
    again = workspace.product().classifier.history  # a new process's product: from the cache
    assert again == first and len(reads) == 2
    relabel(workspace, TRAINING_DAYS[0], lambda t: {**t, "label": None})  # its file changes
    changed = workspace.product().classifier.history
    assert len(reads) == 4 and len(changed.tickets) < len(first.tickets)


def test_labels_that_are_no_intent_are_named_with_their_count(tmp_path, runner, capsys):
    """A label that is no intent of the taxonomy is left out of training, and the history,
    the generation's record and `generations list` name it with how many tickets carry it
    (before, they were dropped silently)."""
    from batch_pipeline import cli

    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    renamed = iter(["billing_old"] * 3 + ["refnd"])

    def stale(t: dict) -> dict:  # four labels from an older taxonomy
        label = next(renamed, None) if t.get("label") and t.get("body") else None
        return {**t, "label": label} if label else t

    relabel(workspace, TRAINING_DAYS[0], stale)
    product = workspace.product()
    assert product.classifier.history.dropped_labels == {"billing_old": 3, "refnd": 1}
    run_day(product, runner, day=TRAINING_DAYS[2])
    dropped = product.trained()["labels_not_in_taxonomy"]
    assert dropped == {"tickets": 4, "labels": {"billing_old": 3, "refnd": 1}}
    args = ["--config", str(workspace.config), "--home", str(workspace.home)]
    assert cli.main([*args, "generations", "list", "--product", "tickets"]) == 0
    assert (
        "4 labelled tickets left out, their label no intent of the taxonomy: billing_old (3), "
        "refnd (1)" in capsys.readouterr().out
    )


def test_a_purged_training_day_does_not_stop_classification(tmp_path, runner, capsys):
    """The fingerprint read every training day's export, so a retention policy that purged
    the oldest stopped every run and `status`. Now the history is the days that are there,
    the missing one is listed on the generation's record, and the day classifies."""
    from batch_pipeline import cli

    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    (tmp_path / "exports" / f"{TRAINING_DAYS[0]}.jsonl").unlink()  # purged by retention
    product = workspace.product()
    assert product.classifier.history.missing_days == [TRAINING_DAYS[0]]
    assert product.classifier.history.tickets  # the other training day still teaches
    landed, _ = run_day(product, runner, day=TRAINING_DAYS[2])
    assert landed.mix.total > 0
    assert product.review(embedder_for(runner)).decision == "promoted"
    assert product.trained()["history_days_missing"] == [TRAINING_DAYS[0]]
    args = ["--config", str(workspace.config), "--home", str(workspace.home)]
    assert cli.main([*args, "status", "--product", "tickets"]) == 0
    assert cli.main([*args, "intents", "--day", TRAINING_DAYS[2]]) == 0
    assert f"trained without {TRAINING_DAYS[0]} (no export)" in capsys.readouterr().out
