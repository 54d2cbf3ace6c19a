"""Which recorded provider batches have finished at the provider: what the provider-batch
sensors ask on each tick, so that one run collects a partition's batches once every one of
them is done (`executors.batch_driver` is the driver that then collects them)."""

from dataclasses import dataclass

from batch_pipeline.executors.batch_api import BatchApiSettings
from batch_pipeline.executors.batch_client import BatchClient, NotFound
from batch_pipeline.executors.registry import batch_client
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
    every batch has finished (one status call per batch, through the API that made it)."""
    groups: dict[tuple[str, str], list[ProviderBatch]] = {}
    for batch in batches:
        groups.setdefault((batch.generation, batch.partition), []).append(batch)
    statuses: dict[str, str] = {}
    for wire in sorted({b.wire or "" for b in batches}):
        client_type = batch_client(wire or None)
        with client_type.opened(api, api.api_key(client_type.key_env)) as client:
            for batch in (b for b in batches if (b.wire or "") == wire):
                statuses[batch.batch_id] = _status_of(client, batch)
    ready = []
    for (generation, partition), members in sorted(groups.items()):
        found = [statuses[b.batch_id] for b in members]
        if all(status in FINAL_STATUSES or status == GIVEN_UP for status in found):
            ids = tuple(sorted(b.batch_id for b in members))
            ready.append(Collectable(generation, partition, ids, members[0].run_id))
    return ready


def _status_of(client: BatchClient, batch: ProviderBatch) -> str:
    """A batch's status at the provider; one a run must settle (an intent whose creation
    never answered, a batch the provider no longer has) counts as finished."""
    if batch.creating:
        return GIVEN_UP
    try:
        return client.retrieve(batch.batch_id).status
    except NotFound:
        return GIVEN_UP
