"""The code location: five stage assets materialised by Dagster, their metadata, validation."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from batch_pipeline.briefs import BRIEF_LAND, BRIEF_STAGES
from batch_pipeline.definitions import build_definitions
from batch_pipeline.stages import STAGES
from batch_pipeline.tickets import TICKET_STAGES
from tests.support import REPO, STAGE_ASSETS, materialize, metadata_of, stage_resources


def test_stage_assets_share_group_partitions_and_kinds(workspace):
    defs = build_definitions(workspace["config"])
    for name in STAGE_ASSETS:
        spec = defs.get_assets_def(name).specs_by_key[dg.AssetKey(name)]
        assert spec.group_name == "embedding_pipeline"
        assert spec.description and len(spec.description) > 40
        assert not spec.owners  # owners come from a project's YAML (test_components)
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
        assert execute["device"] == "cpu" and execute["dtype"] == execute["dtype_decision"]
        assert execute["dtype"] in ("float32", "bfloat16")  # bf16 only where measured faster
        assert execute["inputs_embedded"] == plan["inputs_planned"]
        assert execute["tokens_per_second"] > 0
        land = metadata_of(result, "vector_index")
        assert land["dagster/row_count"] == land["chunks_written"] == execute["inputs_embedded"]
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
        assert metadata_of(again, "chunk_embeddings")["inputs_embedded"] == 0
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


def test_metadata_renders_and_plots_right(workspace):
    """Times are Dagster timestamps, missing values are left out, every column is described,
    checks are per partition, and a no-op run records no throughput."""
    with dg.instance_for_test() as instance:
        first = materialize(workspace, instance, fake_model=True)
        (event,) = first.asset_materializations_for_node("vector_index")
        for key in ("oldest_embedded_at", "newest_embedded_at", "newest_source_change_landed"):
            assert isinstance(event.metadata[key], dg.TimestampMetadataValue), key
        assert "oldest_source_change_pending" not in event.metadata  # nothing pending: absent
        assert all(v.value not in ("null", "None") for v in event.metadata.values())
        for asset in STAGE_ASSETS:
            (materialization,) = first.asset_materializations_for_node(asset)
            columns = materialization.metadata["dagster/column_schema"].value.columns
            assert columns and all(c.description for c in columns), asset
        for check in first.get_asset_check_evaluations():
            assert check.partition == "handbook", check.check_name
        collect = metadata_of(first, "source_documents")
        assert collect["collection_config"]["chunking"]["overlap_tokens"] == 32  # was "***"

        noop = materialize(workspace, instance, fake_model=True)
        execute = metadata_of(noop, "chunk_embeddings")
        assert execute["inputs_embedded"] == 0
        for absent in ("tokens_per_second", "padding_efficiency", "device", "seconds"):
            assert absent not in execute, absent  # recorded 0.0, 1.0 and "none" before
        assert "padding_efficiency" not in metadata_of(noop, "batch_plan")


def test_index_matches_tracking_blocks_what_follows_and_checks_are_described():
    from batch_pipeline.definitions import build_definitions as build

    defs = build(REPO / "pipeline.yaml")
    specs = {
        spec.name: spec
        for name in ("vector_index", "index_generation")
        for spec in defs.get_assets_def(name).check_specs
    }
    assert set(specs) == {
        "index_matches_tracking",
        "freshness_lag_within_budget",
        "completeness",
        "embedding_drift",
        "run_within_window",
        "no_mass_deletion_held",
        "unread_within_limit",
        "indexes_current",
    }
    assert specs["index_matches_tracking"].blocking and specs["indexes_current"].blocking
    assert all(spec.description and spec.partitions_def for spec in specs.values())


def test_the_project_is_a_dg_project_with_one_code_location_name():
    import tomllib

    import yaml

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    module = pyproject["tool"]["dagster"]["module_name"]
    names = {
        workspace["load_from"][0]["python_module"]["location_name"],
        pyproject["tool"]["dagster"]["code_location_name"],
        pyproject["tool"]["dg"]["project"]["code_location_name"],
        module,  # what `-m batch_pipeline.definitions` names it
    }
    assert names == {"batch_pipeline.definitions"}
    checked = subprocess.run(
        [str(Path(sys.executable).parent / "dg"), "check", "defs"],
        cwd=REPO,
        env={**os.environ, "VIRTUAL_ENV": str(Path(sys.executable).parent.parent)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr


def test_the_lineage_draws_each_stage_after_the_one_before_and_nothing_else():
    defs = build_definitions(REPO / "pipeline.yaml")  # both products
    graph = defs.resolve_asset_graph()
    for stages in (STAGES, TICKET_STAGES, BRIEF_STAGES):
        for before, stage in zip(stages, stages[1:], strict=False):
            parents = graph.get(dg.AssetKey(stage.asset)).parent_keys
            if stage is BRIEF_LAND:  # faithfulness is measured against the live index
                assert parents == {dg.AssetKey(before.asset), dg.AssetKey("index_generation")}
                continue
            assert parents == {dg.AssetKey(before.asset)}, stage.asset
