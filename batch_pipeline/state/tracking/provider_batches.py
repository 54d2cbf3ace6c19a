"""The tracking store's record of batches handed to a provider's Batch API (SQL only; the
`openai-batch` executor decides what to submit and collect)."""

import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import provider_batches

# the provider's statuses after which a batch changes no more
FINAL_STATUSES = frozenset({"completed", "expired", "failed", "cancelled"})


@dataclass(frozen=True)
class ProviderBatch:
    """One batch a run submitted for one partition of one generation."""

    batch_id: str
    generation: str
    partition: str
    run_id: str
    input_file_id: str
    requests: int
    attempt: int
    status: str
    submitted_at: float
    collected_at: float | None = None
    collected_by: str | None = None


def _batch(row: sa.Row) -> ProviderBatch:
    """A row by column key (the generation's column is named `collection` in the database)."""
    return ProviderBatch(**{c.key: row._mapping[c] for c in provider_batches.columns})


class ProviderBatchRecords:
    """Reads and writes the `provider_batches` table. Mixed into TrackingStore."""

    engine: Engine

    def record_provider_batch(self, batch: ProviderBatch) -> None:
        row = {
            "batch_id": batch.batch_id,
            "generation": batch.generation,
            "partition": batch.partition,
            "run_id": batch.run_id,
            "input_file_id": batch.input_file_id,
            "requests": batch.requests,
            "attempt": batch.attempt,
            "status": batch.status,
            "submitted_at": batch.submitted_at,
        }
        with self.engine.begin() as conn:
            conn.execute(sa.insert(provider_batches).values(**row))

    def provider_batches(
        self, generation: str, partition: str | None = None, uncollected: bool = False
    ) -> list[ProviderBatch]:
        """A generation's batches (of one partition), oldest first; only those whose results
        are not yet in the checkpoints with `uncollected`."""
        query = sa.select(provider_batches).where(provider_batches.c.generation == generation)
        if partition is not None:
            query = query.where(provider_batches.c.partition == partition)
        if uncollected:
            query = query.where(provider_batches.c.collected_at.is_(None))
        query = query.order_by(provider_batches.c.submitted_at, provider_batches.c.batch_id)
        with self.engine.connect() as conn:
            return [_batch(row) for row in conn.execute(query)]

    def uncollected_provider_batches(self) -> list[ProviderBatch]:
        """Every generation's batches whose results are not yet in the checkpoints."""
        query = (
            sa.select(provider_batches)
            .where(provider_batches.c.collected_at.is_(None))
            .order_by(provider_batches.c.submitted_at)
        )
        with self.engine.connect() as conn:
            return [_batch(row) for row in conn.execute(query)]

    def update_provider_batch(self, batch_id: str, status: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(provider_batches)
                .where(provider_batches.c.batch_id == batch_id)
                .values(status=status)
            )

    def collect_provider_batch(self, batch_id: str, status: str, run_id: str) -> None:
        """Its results are in the checkpoints (or it ended with none to keep)."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(provider_batches)
                .where(provider_batches.c.batch_id == batch_id)
                .values(status=status, collected_at=time.time(), collected_by=run_id)
            )
