"""The indexes_current check in Dagster, with the FAKE embedder: it passes after a land that
built and folded every index, and fails, blocking the generation's review, naming the index
whose build failed, while the land's rows stay committed."""

import dagster as dg

from batch_pipeline.state.table_indexes import TableIndexes
from tests.support import materialize, metadata_of


def check(result, name: str = "indexes_current"):  # noqa: ANN001, ANN201
    (found,) = [c for c in result.get_asset_check_evaluations() if c.check_name == name]
    return found


def test_indexes_current_passes_after_a_land(workspace):
    with dg.instance_for_test() as instance:
        result = materialize(workspace, instance, fake_model=True)
        found = check(result)
        assert found.passed
        values = {k: v.value for k, v in found.metadata.items()}
        assert values["unindexed_rows"] == 0 and values["problems"] == "none"
        assert metadata_of(result, "vector_index")["indexes_built"] == 2  # text and title


def test_indexes_current_fails_naming_the_index_whose_build_failed(workspace, monkeypatch):
    def fail(self, spec):  # noqa: ANN001, ANN202
        raise OSError("No space left on device")

    monkeypatch.setattr(TableIndexes, "_config", fail)
    with dg.instance_for_test() as instance:
        from batch_pipeline.definitions import build_definitions
        from tests.support import STAGE_ASSETS, stage_resources

        defs = build_definitions(workspace["config"])
        result = dg.materialize(
            [defs.get_assets_def(name) for name in [*STAGE_ASSETS, "index_generation"]],
            partition_key="handbook",
            instance=instance,
            resources=stage_resources(workspace, fake_model=True),
            raise_on_error=False,
        )
        found = check(result)
        assert not found.passed
        problems = found.metadata["problems"].value
        assert "text_idx: build failed: OSError: No space left on device" in problems
        assert metadata_of(result, "vector_index")["documents_landed"] == 3  # committed
        planned = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
        assert "index_generation" not in planned  # blocked: no review on stale indexes


def test_rows_another_shard_lands_after_this_land_do_not_fail_its_check(workspace, monkeypatch):
    """The check reads the indexes as this land left them, under its lease: four shards of
    one collection land into one table, and another's commit may come before the asset
    reads (a CI run once failed so, on 20 rows of another shard)."""
    import pyarrow as pa

    from batch_pipeline.index.partition import IndexPartition

    land = IndexPartition.land

    def land_then_another_shard_lands(self, *args, **kwargs):  # noqa: ANN001, ANN202
        summary = land(self, *args, **kwargs)
        table = self.store.open(self.index)
        row = table.to_arrow().slice(0, 1)
        column = row.schema.get_field_index("chunk_id")
        table.add(row.set_column(column, "chunk_id", pa.array(["another-shard#0"])))
        return summary

    monkeypatch.setattr(IndexPartition, "land", land_then_another_shard_lands)
    with dg.instance_for_test() as instance:
        result = materialize(workspace, instance, fake_model=True)
        found = check(result)
        assert found.passed, found.metadata
        assert found.metadata["unindexed_rows"].value == 0
