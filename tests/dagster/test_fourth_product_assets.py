"""The fourth product (`tests/lengths/`, declared in the configuration) in Dagster: its
definitions join the code location's, its stage assets come from the one builder, land
reports the frame's no_mass_deletion_held check, and the nightly run forces its review."""

import shutil

import dagster as dg

from batch_pipeline.definitions import build_definitions
from resources.testing import FakeInferenceResource
from tests.engine.test_fourth_product import write_workspace
from tests.support import metadata_of, stage_resources

LENGTH_ASSETS = ("length_inputs", "length_plan", "length_buckets", "document_lengths")


def materialize(root, instance, tags=None):  # noqa: ANN001, ANN201
    defs = build_definitions(root / "pipeline.yaml")
    workspace = {"config": root / "pipeline.yaml", "home": root / "home"}
    return dg.materialize(
        [defs.get_assets_def(name) for name in ("source_documents", *LENGTH_ASSETS)],
        partition_key="handbook",
        instance=instance,
        resources={**stage_resources(workspace), "inference": FakeInferenceResource(device="cpu")},
        tags=tags,
        raise_on_error=False,
    )


def held_check(result) -> dg.AssetCheckEvaluation:  # noqa: ANN001
    (held,) = [
        c
        for c in result.get_asset_check_evaluations()
        if c.check_name == "no_mass_deletion_held" and c.asset_key.path == ["document_lengths"]
    ]
    return held


def test_the_declared_product_materialises_in_the_code_location(tmp_path):
    write_workspace(tmp_path)
    defs = build_definitions(tmp_path / "pipeline.yaml")
    land = defs.get_assets_def("document_lengths")
    assert land.group_names_by_key[dg.AssetKey("document_lengths")] == "document_lengths"
    with dg.instance_for_test() as instance:
        first = materialize(tmp_path, instance)
        assert first.success
        landed = metadata_of(first, "document_lengths")
        assert landed["documents_landed"] == 3 and landed["review_decision"] == "promoted"
        assert held_check(first).passed

        noop = materialize(tmp_path, instance)
        assert metadata_of(noop, "document_lengths")["review_evaluated"] is False
        nightly = materialize(tmp_path, instance, tags={"batch_pipeline/mode": "reconcile"})
        landed = metadata_of(nightly, "document_lengths")
        assert landed["review_evaluated"] is True and landed["generations_dropped"] == 0

        shutil.rmtree(tmp_path / "docs")
        (tmp_path / "docs").mkdir()
        emptied = materialize(tmp_path, instance)
        landed = metadata_of(emptied, "document_lengths")
        assert landed["deletions_held"] == 3 and landed["documents_deleted"] == 0
        assert not held_check(emptied).passed


def test_the_declared_product_rides_the_publish_sensors_and_the_nightly_runs(tmp_path):
    """Its declaration says `collection_runs=True`, and nothing else: the collections' job
    that each publish sensor and the nightly reconciliation launch selects its stages with
    the partition's collect; the ticket intents' daily job selects none of them."""
    write_workspace(tmp_path)
    defs = build_definitions(tmp_path / "pipeline.yaml")
    job = defs.resolve_job_def("embedding_job")
    selected = {key.to_user_string() for key in job.asset_layer.selected_asset_keys}
    assert {"source_documents", "vector_index", *LENGTH_ASSETS} <= selected
    assert defs.resolve_sensor_def("handbook_publish_sensor").job_name == job.name
    assert defs.resolve_schedule_def("nightly_reconciliation").job_name == job.name
