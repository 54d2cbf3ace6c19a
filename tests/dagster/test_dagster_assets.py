"""The code location: five stage assets materialised by Dagster, their metadata, validation."""

import os
import subprocess
import sys

import dagster as dg

from batch_pipeline.definitions import build_definitions
from batch_pipeline.inference.runner import pick_dtype
from tests.support import REPO, STAGE_ASSETS, materialize, metadata_of, stage_resources


def test_stage_assets_share_group_partitions_owners_and_kinds(workspace):
    defs = build_definitions(workspace["config"])
    for name in STAGE_ASSETS:
        spec = defs.get_assets_def(name).specs_by_key[dg.AssetKey(name)]
        assert spec.group_name == "embedding_pipeline"
        assert spec.description and len(spec.description) > 40
        assert spec.owners == ["team:search-platform"]
        assert spec.kinds
        assert spec.partitions_def.get_partition_keys() == ["handbook"]
    for name in ("source_documents", "chunk_embeddings", "vector_index"):
        policy = defs.get_assets_def(name).op.retry_policy
        assert policy.max_retries == 3 and policy.backoff == dg.Backoff.EXPONENTIAL
    assert defs.get_assets_def("chunk_embeddings").op.pool == "gpu"


def test_materialising_every_stage_records_metadata_per_partition(workspace):
    with dg.instance_for_test() as instance:
        result = materialize(workspace, instance)
        assert result.success
        collect = metadata_of(result, "source_documents")
        assert collect["documents_new"] == 3
        assert collect["dagster/row_count"] == 3
        assert "doc_id" in [c.name for c in collect["dagster/column_schema"].columns]
        plan = metadata_of(result, "batch_plan")
        assert 0 < plan["padding_efficiency"] <= 1
        assert plan["batch_count"] >= 1
        execute = metadata_of(result, "chunk_embeddings")
        assert execute["device"] == "cpu" and execute["dtype"] == pick_dtype("cpu")
        assert execute["chunks_embedded"] == plan["inputs_planned"]
        assert execute["tokens_per_second"] > 0
        land = metadata_of(result, "vector_index")
        assert land["dagster/row_count"] == land["chunks_written"] == execute["chunks_embedded"]
        assert "/handbook__" in land["dagster/uri"] and land["dagster/uri"].endswith(".lance")
        assert land["table_version"] >= 1
        assert land["run_id"] == result.run_id
        assert land["oldest_embedded_at"] <= land["newest_embedded_at"]
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert checks["index_matches_tracking"].passed
        assert checks["freshness_lag_within_budget"].passed
        assert land["lag_seconds"] == 0.0 and land["pending_documents"] == 0
        assert land["newest_source_change_landed"]

        again = materialize(workspace, instance)
        assert metadata_of(again, "source_documents")["documents_unchanged"] == 3
        assert metadata_of(again, "chunk_embeddings")["chunks_embedded"] == 0
        assert metadata_of(again, "vector_index")["dagster/row_count"] == land["dagster/row_count"]


def test_a_stage_rerun_alone_reads_its_upstreams_latest_output(workspace):
    with dg.instance_for_test() as instance:
        assert materialize(workspace, instance).success
        (workspace["docs"] / "refunds.md").unlink()
        defs = build_definitions(workspace["config"])
        resources = stage_resources(workspace)
        first = dg.materialize(
            [defs.get_assets_def(n) for n in STAGE_ASSETS[:2]],
            partition_key="handbook",
            instance=instance,
            resources=resources,
        )
        assert first.success
        rest = dg.materialize(
            [defs.get_assets_def(n) for n in STAGE_ASSETS],
            selection=STAGE_ASSETS[2:],
            partition_key="handbook",
            instance=instance,
            resources=resources,
        )
        assert rest.success
        assert metadata_of(rest, "vector_index")["documents_deleted"] == 1


def validate_definitions(**env_overrides: str) -> subprocess.CompletedProcess:
    """`dagster definitions validate` on the code location, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate"]
        + ["-m", "batch_pipeline.definitions"],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env_overrides},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dagster_definitions_validate_passes():
    result = validate_definitions()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful" in result.stdout + result.stderr


def test_a_bad_config_fails_code_location_load_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("collections:\n  - name: Bad Name\n    source: {kind: filesystem, path: d}\n")
    result = validate_definitions(BATCH_PIPELINE_CONFIG=str(bad))
    assert result.returncode != 0
    assert "collections[0].name" in result.stdout + result.stderr


def test_the_generation_asset_reports_its_decision_and_drift(workspace):
    import json as _json

    (workspace["root"] / "eval.jsonl").write_text(
        _json.dumps({"query": "I forgot my password", "relevant": ["account/reset-password.md"]})
    )
    workspace["config"].write_text(
        workspace["config"].read_text() + "    evaluation: {path: eval.jsonl, k: 3}\n"
    )
    defs = build_definitions(workspace["config"])
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [defs.get_assets_def(n) for n in [*STAGE_ASSETS, "index_generation"]],
            partition_key="handbook",
            instance=instance,
            resources=stage_resources(workspace),
        )
        assert result.success
        meta = metadata_of(result, "index_generation")
        assert meta["state"] == "live" and meta["complete"] is True
        assert meta["decision"] == "live"
        assert meta["candidate_recall_at_3"] == 1.0
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert checks["embedding_drift"].passed
