"""In Dagster, a held mass deletion fails the `no_mass_deletion_held` check, and the
`allow_mass_delete` run config on `vector_index` confirms it."""

import dagster as dg

from tests.support import figure, materialize, metadata_of


def test_a_held_mass_deletion_fails_its_check_until_confirmed(workspace):
    with dg.instance_for_test() as instance:
        assert materialize(workspace, instance, fake_model=True).success
        for page in [p for p in workspace["docs"].rglob("*") if p.is_file()]:
            page.unlink()  # what an unmounted volume looks like
        held = materialize(workspace, instance, fake_model=True)
        assert held.success  # everything else landed
        check = {c.check_name: c for c in held.get_asset_check_evaluations()}[
            "no_mass_deletion_held"
        ]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
        assert figure(check.metadata["deletions_held"].value) == 3
        assert "limits.max_delete_fraction (0.5)" in check.metadata["reason"].value
        assert metadata_of(held, "vector_index")["dagster/row_count"] > 0

        confirm = {"ops": {"vector_index": {"config": {"allow_mass_delete": True}}}}
        confirmed = materialize(workspace, instance, run_config=confirm, fake_model=True)
        checks = {c.check_name: c for c in confirmed.get_asset_check_evaluations()}
        assert checks["no_mass_deletion_held"].passed
        land = metadata_of(confirmed, "vector_index")
        assert land["documents_deleted"] == 3 and land["dagster/row_count"] == 0
