"""The tracking store's record of batches handed to a provider's Batch API (SQL only; the
`openai-batch` executor decides what to submit and collect).

A batch is recorded before it is created, as an intent (`CREATING`, under a placeholder id)
holding its file's SHA-256 and its requests' custom_ids; the provider's id replaces the
placeholder once the creation answers. A run that finds an intent asks the provider for a
batch carrying that file's hash in its metadata, and adopts it or forgets the intent."""

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import provider_batch_requests, provider_batches

# the provider's statuses after which a batch changes no more
FINAL_STATUSES = frozenset({"completed", "expired", "failed", "cancelled"})
CREATING = "creating"  # recorded, its creation not yet answered: not known to be at the provider
INTENT_PREFIX = "creating-"  # a placeholder batch id, until the provider's
GIVEN_UP = "given_up"  # the provider no longer has it (a 404): its requests are sent again
DROPPED = "dropped"  # an operator dropped it (`batch-pipeline batches drop`)


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
    file_sha256: str | None = None
    note: str | None = None
    api_base: str | None = None  # where it was sent, credentials masked
    wire: str | None = None  # the API it was sent through: "openai" (None: recorded before)

    @property
    def creating(self) -> bool:
        """Recorded before its creation, which has not answered (`record_batch_intent`)."""
        return self.batch_id.startswith(INTENT_PREFIX)


def _batch(row: sa.Row) -> ProviderBatch:
    """A row by column key (the generation's column is named `collection` in the database)."""
    return ProviderBatch(**{c.key: row._mapping[c] for c in provider_batches.columns})


class ProviderBatchRecords:
    """Reads and writes the `provider_batches` table. Mixed into TrackingStore."""

    engine: Engine

    def record_batch_intent(
        self,
        generation: str,
        partition: str,
        run_id: str,
        file_id: str,
        file_sha256: str,
        custom_ids: Iterable[str],
        attempt: int,
        api_base: str | None = None,
        wire: str | None = None,
    ) -> str:
        """Before a batch is created: its requests' ids under its file's hash, and a row under
        a placeholder id (returned), in one transaction."""
        intent = f"{INTENT_PREFIX}{uuid.uuid4().hex}"
        lines = {custom_id: n for n, custom_id in enumerate(custom_ids, start=1)}
        ids = sorted(lines)
        with self.engine.begin() as conn:
            known = conn.execute(
                sa.select(sa.func.count())
                .select_from(provider_batch_requests)
                .where(provider_batch_requests.c.file_sha256 == file_sha256)
            ).scalar_one()
            if not known:
                for start in range(0, len(ids), 5000):
                    conn.execute(
                        sa.insert(provider_batch_requests),
                        [
                            {"file_sha256": file_sha256, "custom_id": i, "line": lines[i]}
                            for i in ids[start : start + 5000]
                        ],
                    )
            conn.execute(
                sa.insert(provider_batches).values(
                    batch_id=intent,
                    generation=generation,
                    partition=partition,
                    run_id=run_id,
                    input_file_id=file_id,
                    requests=len(ids),
                    attempt=attempt,
                    status=CREATING,
                    submitted_at=time.time(),
                    file_sha256=file_sha256,
                    api_base=None if api_base is None else api_base[:512],
                    wire=wire,
                )
            )
        return intent

    def batch_created(self, intent: str, batch_id: str, status: str) -> None:
        """The provider's id for the batch recorded as `intent`."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(provider_batches)
                .where(provider_batches.c.batch_id == intent)
                .values(batch_id=batch_id, status=status)
            )

    def forget_batch_intent(self, intent: str) -> None:
        """An intent no batch came of: its requests are unanswered, and sent again."""
        with self.engine.begin() as conn:
            conn.execute(sa.delete(provider_batches).where(provider_batches.c.batch_id == intent))

    def batch_request_ids(self, file_sha256: str | None) -> set[str] | None:
        """The custom_ids of the batch file with this hash; None where none were recorded (a
        batch submitted before they were)."""
        if not file_sha256:
            return None
        with self.engine.connect() as conn:
            ids = {
                row[0]
                for row in conn.execute(
                    sa.select(provider_batch_requests.c.custom_id).where(
                        provider_batch_requests.c.file_sha256 == file_sha256
                    )
                )
            }
        return ids or None

    def batch_request_lines(self, file_sha256: str | None) -> dict[int, str]:
        """The custom_id on each line (from 1) of the batch file with this hash; empty where
        no lines were recorded."""
        if not file_sha256:
            return {}
        table = provider_batch_requests
        query = sa.select(table.c.line, table.c.custom_id).where(
            table.c.file_sha256 == file_sha256, table.c.line.is_not(None)
        )
        with self.engine.connect() as conn:
            return {line: custom_id for line, custom_id in conn.execute(query)}

    def provider_batch(self, batch_id: str) -> ProviderBatch | None:
        query = sa.select(provider_batches).where(provider_batches.c.batch_id == batch_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _batch(row)

    def recent_provider_batches(self, since: float) -> list[ProviderBatch]:
        """Every batch in flight, and those collected since `since`, oldest first."""
        query = (
            sa.select(provider_batches)
            .where(
                sa.or_(
                    provider_batches.c.collected_at.is_(None),
                    provider_batches.c.collected_at >= since,
                )
            )
            .order_by(provider_batches.c.submitted_at, provider_batches.c.batch_id)
        )
        with self.engine.connect() as conn:
            return [_batch(row) for row in conn.execute(query)]

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

    def collect_provider_batch(
        self, batch_id: str, status: str, run_id: str, note: str | None = None
    ) -> None:
        """Its results are in the checkpoints (or it ended with none to keep, `note` says
        why); its requests' ids go once no batch in flight has the same file."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(provider_batches)
                .where(provider_batches.c.batch_id == batch_id)
                .values(
                    status=status,
                    collected_at=time.time(),
                    collected_by=run_id,
                    note=None if note is None else note[:512],
                )
            )
            flying = (
                sa.select(provider_batches.c.batch_id)
                .where(provider_batches.c.file_sha256 == provider_batch_requests.c.file_sha256)
                .where(provider_batches.c.collected_at.is_(None))
            )
            done = (
                sa.select(provider_batches.c.file_sha256)
                .where(provider_batches.c.batch_id == batch_id)
                .scalar_subquery()
            )
            conn.execute(
                sa.delete(provider_batch_requests)
                .where(provider_batch_requests.c.file_sha256 == done)
                .where(~sa.exists(flying))
            )
