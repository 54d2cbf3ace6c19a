"""Failure-mode claims that show in Dagster: the completeness check, and secrets that never
reach metadata or logs."""

import uuid

import dagster as dg
import sqlalchemy as sa

from batch_pipeline.definitions import build_definitions
from batch_pipeline.stages import COLLECT
from tests.support import POSTGRES_URL, materialize, metadata_values, stage_resources


def test_completeness_check_fails_below_threshold(workspace):
    (workspace["docs"] / "empty.md").write_bytes(b"")
    with dg.instance_for_test() as instance:
        result = materialize(workspace, instance)
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert not checks["completeness"].passed
        meta = metadata_values(checks["completeness"].metadata)
        assert meta["completeness"] == 0.75 and meta["documents_intended"] == 4


def test_secrets_are_redacted_from_metadata(workspace):
    name = f"pages_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(POSTGRES_URL)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {name} (id TEXT PRIMARY KEY, title TEXT, body TEXT, updated_at TEXT)"
            )
        )
        conn.execute(sa.text(f"INSERT INTO {name} VALUES ('1', 'T', 'Body.', '2026-11-01')"))
    # the server trusts local connections, so the password is ignored; it must never show
    secret_url = POSTGRES_URL.replace("postgres@", "postgres:hunter2@")
    assert "hunter2" in secret_url
    workspace["config"].write_text(
        "collections:\n  - name: handbook\n"
        f"    source: {{kind: sql, url: '{secret_url}', table: {name}}}\n"
    )
    defs = build_definitions(workspace["config"])
    try:
        with dg.instance_for_test() as instance:
            result = dg.materialize(
                [defs.get_assets_def(COLLECT.asset)],
                partition_key="handbook",
                instance=instance,
                resources=stage_resources(workspace),
            )
            assert result.success
            (event,) = result.asset_materializations_for_node(COLLECT.asset)
            shown = str({k: v.value for k, v in event.metadata.items()})
            assert "hunter2" not in shown
            assert "postgres:***@" in shown
            logs = " ".join(str(e.message) for e in instance.all_logs(result.run_id))
            assert "hunter2" not in logs
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE {name}"))
