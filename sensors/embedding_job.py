"""The job the publish sensors and the nightly schedule launch: one collection partition, for
every product that rides the collections' runs."""

from collections.abc import Sequence

import dagster as dg

from assets.namespace import SAMPLE, Namespace

EMBEDDING_JOB = "embedding_job"


def build_embedding_job(  # noqa: ANN201 - an asset job
    assets: Sequence[dg.AssetsDefinition], namespace: Namespace = SAMPLE
):
    """The job over `assets` (with their checks), those of the products that declare they
    ride the collections' runs (the vector index, the briefs, a declared product that says
    so), named in `namespace`. It selects those assets themselves, not their groups: another
    instance's, in groups of the same name, are not its."""
    groups = sorted({g for asset in assets for g in asset.group_names_by_key.values()})
    return dg.define_asset_job(
        namespace.name(EMBEDDING_JOB),
        selection=dg.AssetSelection.assets(*assets),
        description="Collect, prepare, plan, execute and land one collection; then review "
        "its model generation. Every product that rides the collections' runs runs from the "
        f"same collect, on its stale documents only (asset groups: {', '.join(groups)}).",
    )
