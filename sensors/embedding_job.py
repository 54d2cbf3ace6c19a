"""The job the publish sensors and the nightly schedule launch: one collection partition, for
every product that rides the collections' runs."""

import dagster as dg

EMBEDDING_JOB = "embedding_job"


def build_embedding_job(groups: list[str]):  # noqa: ANN201 - an asset job
    """The job over the asset `groups` of the products that declare they ride the collections'
    runs (the vector index, the briefs, a declared product that says so)."""
    return dg.define_asset_job(
        EMBEDDING_JOB,
        selection=dg.AssetSelection.groups(*groups),
        description="Collect, prepare, plan, execute and land one collection; then review "
        "its model generation. Every product that rides the collections' runs runs from the "
        f"same collect, on its stale documents only (asset groups: {', '.join(groups)}).",
    )
