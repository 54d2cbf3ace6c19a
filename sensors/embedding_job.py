"""The job the sensors and the schedule launch: all five stages of one partition."""

import dagster as dg

from assets.document_briefs import BRIEFS_GROUP
from assets.index_generation import GENERATIONS_GROUP
from assets.partitions import GROUP_NAME

EMBEDDING_JOB = "embedding_job"


def build_embedding_job():
    return dg.define_asset_job(
        EMBEDDING_JOB,
        selection=dg.AssetSelection.groups(GROUP_NAME, GENERATIONS_GROUP, BRIEFS_GROUP),
        description="Collect, prepare, plan, execute and land one collection; then review "
        "its model generation. A collection with briefs: configured then has its stale "
        "documents briefed too, from the same collect.",
    )
