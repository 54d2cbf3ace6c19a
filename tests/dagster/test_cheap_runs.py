"""A run that finds nothing to do loads no model: not in execute, and not in
index_generation, whose review and drift check stand while the table is unchanged."""

from datetime import UTC, datetime, timedelta

import dagster as dg

from resources.testing import FakeInferenceResource
from tests.support import STAGE_ASSETS, metadata_of, stage_resources

LOADS: list[str] = []


class CountingInferenceResource(FakeInferenceResource):
    """The FAKE embedder, counting model loads (a runner built, not one reused)."""

    def runner(self, model):  # noqa: ANN001, ANN201
        if str(model.path) not in self._fakes:
            LOADS.append(model.name)
        return super().runner(model)


def materialize_all(workspace, instance, tags=None):  # noqa: ANN001, ANN201
    from batch_pipeline.definitions import build_definitions

    defs = build_definitions(workspace["config"])
    return dg.materialize(
        [defs.get_assets_def(name) for name in (*STAGE_ASSETS, "index_generation")],
        partition_key="handbook",
        instance=instance,
        resources={**stage_resources(workspace), "inference": CountingInferenceResource()},
        tags=tags,
    )


def test_a_no_op_run_loads_no_model_and_the_last_review_stands(workspace):
    LOADS.clear()
    with dg.instance_for_test() as instance:
        first = materialize_all(workspace, instance)
        assert metadata_of(first, "index_generation")["evaluated"] is True and LOADS
        LOADS.clear()
        noop = materialize_all(workspace, instance)
        assert LOADS == []
        review = metadata_of(noop, "index_generation")
        assert review["evaluated"] is False and review["state"] == "live"
        (drift,) = [
            c for c in noop.get_asset_check_evaluations() if c.check_name == "embedding_drift"
        ]
        assert drift.passed and drift.metadata["checked"].value is False
        nightly = materialize_all(workspace, instance, tags={"batch_pipeline/mode": "reconcile"})
        assert metadata_of(nightly, "index_generation")["evaluated"] is True and LOADS


def test_the_nightly_review_drops_the_index_s_retired_generations_past_retention(workspace):
    """The index's retention is every product's: the nightly review drops what retired
    longer than `generations.retention_days` ago (`declaration.review_after_run`)."""
    from batch_pipeline.config import load_config
    from batch_pipeline.generations.registry import DROPPED, RETIRED, GenerationRegistry
    from batch_pipeline.state.storage import resolve_storage
    from batch_pipeline.state.tracking import TrackingStore

    with dg.instance_for_test() as instance:
        materialize_all(workspace, instance)
        config = load_config(workspace["config"])
        tracking = TrackingStore(resolve_storage(str(workspace["home"])).tracking_url)
        registry = GenerationRegistry(tracking)
        old = registry.ensure("handbook", "e" * 16, f"handbook__{'e' * 16}", {})
        ago = datetime.now(UTC) - timedelta(days=config.generations.retention_days + 1)
        registry.update("handbook", old.fingerprint, state=RETIRED, retired_at=ago.timestamp())

        manual = materialize_all(workspace, instance)
        assert metadata_of(manual, "index_generation")["generations_dropped"] == 0
        assert registry.get("handbook", old.fingerprint).state == RETIRED  # kept till nightly
        nightly = materialize_all(workspace, instance, tags={"batch_pipeline/mode": "reconcile"})
        assert metadata_of(nightly, "index_generation")["generations_dropped"] == 1
        assert registry.get("handbook", old.fingerprint).state == DROPPED


def test_a_targeted_run_loads_the_model_once_for_execute_and_the_review(workspace):
    with dg.instance_for_test() as instance:
        materialize_all(workspace, instance)
        page = workspace["docs"] / "refunds.md"
        page.write_text(page.read_text() + "\n\nRefunds for annual plans are prorated.\n")
        LOADS.clear()
        changed = materialize_all(workspace, instance)
        assert metadata_of(changed, "chunk_embeddings")["inputs_embedded"] >= 1
        assert metadata_of(changed, "index_generation")["evaluated"] is True  # table changed
        assert len(LOADS) == 1  # execute loaded it; the review reused it
