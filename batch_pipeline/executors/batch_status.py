"""Which recorded provider batches have finished at the provider: what the provider-batch
sensors ask on each tick, so that one run collects a partition's batches once every one of
them is done (`executors.batch_driver` is the driver that then collects them)."""

from dataclasses import dataclass

from batch_pipeline.executors.batch_api import BatchApiSettings
from batch_pipeline.executors.batch_client import batch_client
from batch_pipeline.state.tracking import FINAL_STATUSES, GIVEN_UP, ProviderBatch


@dataclass(frozen=True)
class Collectable:
    """A partition whose batches have all finished at the provider: a run of it collects
    them."""

    generation: str
    partition: str
    batch_ids: tuple[str, ...]
    submitted_by: str  # the run that submitted the first of them


def collectable(api: BatchApiSettings, batches: list[ProviderBatch]) -> list[Collectable]:
    """Of these uncollected batches, grouped by generation and partition, the groups whose
    every batch has finished (one status call per batch)."""
    groups: dict[tuple[str, str], list[ProviderBatch]] = {}
    for batch in batches:
        groups.setdefault((batch.generation, batch.partition), []).append(batch)
    key = api.api_key()
    ready = []
    with batch_client(api, key) as client:
        for (generation, partition), members in sorted(groups.items()):
            statuses = [_status_of(client, b) for b in members]
            if all(status in FINAL_STATUSES or status == GIVEN_UP for status in statuses):
                ids = tuple(sorted(b.batch_id for b in members))
                ready.append(Collectable(generation, partition, ids, members[0].run_id))
    return ready


def _status_of(client, batch: ProviderBatch) -> str:  # noqa: ANN001
    """A batch's status at the provider; one a run must settle (an intent whose creation
    never answered, a batch the provider no longer has) counts as finished."""
    import openai

    if batch.creating:
        return GIVEN_UP
    try:
        return str(client.batches.retrieve(batch.batch_id).status)
    except openai.NotFoundError:
        return GIVEN_UP
