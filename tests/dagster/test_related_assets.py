"""Related documents in Dagster: their stage assets ride the collections' job after the
partition's index lands (prepare waits for `vector_index`), land reports the lists it scored
and the review, and a collection without `related:` materialises nothing of them."""

import shutil
from pathlib import Path

import dagster as dg

from batch_pipeline.definitions import build_definitions
from tests.support import metadata_of, stage_resources

HANDBOOK = Path(__file__).resolve().parents[2] / "data" / "handbook"
INDEX_ASSETS = (
    "source_documents",
    "document_chunks",
    "batch_plan",
    "chunk_embeddings",
    "vector_index",
)
RELATED_ASSETS = ("related_candidates", "related_plan", "related_scores", "related_documents")


def workspace(root: Path, related: bool = True) -> dict:
    docs = root / "docs"
    for page in sorted(HANDBOOK.rglob("*.md"))[:12]:
        target = docs / page.relative_to(HANDBOOK)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(page, target)
    (root / "pipeline.yaml").write_text(
        "collections:\n  - name: handbook\n"
        '    source: {kind: filesystem, path: docs, glob: "**/*.md"}\n'
        + ("    related: {k: 3, candidates: 5}\n" if related else "")
    )
    return {"config": root / "pipeline.yaml", "home": root / "home", "root": root}


def materialize(space: dict, instance, **resources) -> dg.ExecuteInProcessResult:  # noqa: ANN001
    """The index's and the related documents' assets of the partition, on the stage
    resources (with any of `resources` in their place); a failure is returned, not raised."""
    defs = build_definitions(space["config"])
    return dg.materialize(
        [defs.get_assets_def(name) for name in (*INDEX_ASSETS, *RELATED_ASSETS)],
        partition_key="handbook",
        instance=instance,
        resources={**stage_resources(space, fake_model=True), **resources},
        raise_on_error=False,
    )


def test_related_documents_ride_the_collection_s_run_after_its_index(tmp_path):
    space = workspace(tmp_path)
    defs = build_definitions(space["config"])
    prepare = defs.get_assets_def("related_candidates")
    assert dg.AssetKey("vector_index") in prepare.asset_deps[dg.AssetKey("related_candidates")]
    with dg.instance_for_test() as instance:
        first = materialize(space, instance)
        assert first.success
        landed = metadata_of(first, "related_documents")
        assert landed["lists_scored"] == 12 and landed["review_decision"] == "promoted"
        assert metadata_of(first, "related_candidates")["stale_changed"] == 12
        again = materialize(space, instance)
        assert metadata_of(again, "related_documents")["lists_scored"] == 0


def test_a_collection_without_related_materialises_none_of_them(tmp_path):
    space = workspace(tmp_path, related=False)
    defs = build_definitions(space["config"])
    assert "related_candidates" not in {k.to_user_string() for k in defs.resolve_all_asset_keys()}


def test_the_scoring_resource_chooses_the_executor_related_documents_open_on(tmp_path):
    """In Dagster the related documents open on the score executor the scoring resource
    names (`BATCH_PIPELINE_SCORING_EXECUTOR` in the shipped definitions), as `run --kind
    related --executor` names it on the command line; they ran `local` whatever was set."""
    from assets.product_stages import open_declared
    from batch_pipeline.related.kind import RELATED
    from resources import ScoringResource

    space = workspace(tmp_path)
    defs = build_definitions(space["config"])
    scores = defs.get_assets_def("related_scores")
    assert "scoring" in scores.required_resource_keys
    with dg.instance_for_test() as instance:
        assert materialize(space, instance).success  # the index, so the lists can open
    resources = {
        **stage_resources(space, fake_model=True),
        "scoring": ScoringResource(executor="vllm-run-batch", device="cpu"),
    }
    with dg.build_asset_context(resources=resources, partition_key="handbook") as context:
        product, _partition = open_declared(RELATED)(context)
    chosen = product.product.execution
    assert (chosen.name, chosen.device) == ("vllm-run-batch", "cpu")
    assert chosen.spelled("executor") == "ScoringResource.executor"


def test_a_scoring_resource_it_cannot_run_on_is_refused_by_field(tmp_path):
    from resources import ScoringResource

    space = workspace(tmp_path)
    with dg.instance_for_test() as instance:
        result = materialize(space, instance, scoring=ScoringResource(executor="openai-batch"))
    assert not result.success
    said = str(result.all_events)
    assert "ScoringResource.api_base: the openai-batch executor needs" in said
