"""The job the publish sensors and the nightly schedule launch: one collection partition, for
every product that rides the collections' runs."""

import dagster as dg

from assets.namespace import SAMPLE, Namespace

EMBEDDING_JOB = "embedding_job"


def build_embedding_job(groups: list[str], namespace: Namespace = SAMPLE):  # noqa: ANN201
    """The job over the asset `groups`, in `namespace`, of the products that declare they
    ride the collections' runs (the vector index, the briefs, a declared product that says
    so)."""
    return dg.define_asset_job(
        namespace.name(EMBEDDING_JOB),
        selection=namespace.selection(*groups),
        description="Collect, prepare, plan, execute and land one collection; then review "
        "its model generation. Every product that rides the collections' runs runs from the "
        f"same collect, on its stale documents only (asset groups: {', '.join(groups)}).",
    )
