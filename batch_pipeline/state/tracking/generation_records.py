"""The tracking store's generation records and audit log (SQL only; policy lives in
`batch_pipeline.generations`)."""

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import audit_log, generations

LIVE, RETIRED = "live", "retired"


@dataclass(frozen=True)
class GenerationRecord:
    """One product's generation for one fingerprint, as tracking records it."""

    product: str  # the product that owns it: a collection's name, or the ticket product's
    fingerprint: str
    index_name: str  # the generation's table: <product>__<fingerprint>
    state: str  # building, candidate, live, retired, dropped
    model_config: str  # JSON
    full_pass: bool
    full_passes: str | None  # JSON list of the partitions that had a full pass
    documents: int
    rows: int
    complete: bool
    scores: str | None
    decision: str | None
    created_at: float
    updated_at: float
    promoted_at: float | None
    retired_at: float | None
    reviewed_key: str | None = None  # what the last review saw (see `generations.review`)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def passed_partitions(self) -> set[str]:
        return set(json.loads(self.full_passes or "[]"))

    @property
    def precision(self) -> str | None:
        """The embedding precision class it was built under (`model.precision`: faithful or
        fixed_accuracy), from the model config it keeps: a collection's is the model's, the
        ticket product's holds it under `model`. None for a product without one."""
        try:
            built = json.loads(self.model_config or "{}")
        except ValueError:
            return None
        model = built.get("model", built) if isinstance(built, dict) else None
        if isinstance(model, dict) and "document_prefix" in model:
            return str(model.get("precision", "faithful"))
        return None

    def admitting_scores(self) -> dict[str, float]:
        """The scores its last review measured it at (its own, not live's): what admitted
        it, or refused it."""
        try:
            scores = json.loads(self.scores or "{}").get("candidate") or {}
        except (ValueError, AttributeError):
            return {}
        return {k: v for k, v in scores.items() if isinstance(v, float)}


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: float
    actor: str
    action: str
    product: str
    from_index: str | None
    to_index: str | None
    details: str | None


def _by_key(table: sa.Table, row: sa.Row) -> dict[str, Any]:
    """A row's values by column key (the `collection` column is the `product` key)."""
    keys = {column.name: column.key for column in table.columns}
    return {keys[name]: value for name, value in row._mapping.items()}


class GenerationRecords:
    """Reads and writes the `generations` and `audit_log` tables. Mixed into TrackingStore."""

    engine: Engine

    def _generations(self, *where: sa.ColumnElement) -> list[GenerationRecord]:
        query = (
            sa.select(generations)
            .where(*where)
            .order_by(generations.c.product, generations.c.created_at)
        )
        with self.engine.connect() as conn:
            return [GenerationRecord(**_by_key(generations, row)) for row in conn.execute(query)]

    def generation(self, product: str, fingerprint: str) -> GenerationRecord | None:
        rows = self._generations(
            generations.c.product == product, generations.c.fingerprint == fingerprint
        )
        return rows[0] if rows else None

    def live_generation(self, product: str) -> GenerationRecord | None:
        rows = self._generations(generations.c.product == product, generations.c.state == LIVE)
        return rows[0] if rows else None

    def list_generations(self, product: str | None = None) -> list[GenerationRecord]:
        if product is None:
            return self._generations()
        return self._generations(generations.c.product == product)

    def insert_generation(self, values: dict[str, Any]) -> None:
        """Register a generation; a concurrent run that registered it first wins."""
        try:
            with self.engine.begin() as conn:
                conn.execute(generations.insert().values(**values))
        except sa.exc.IntegrityError:
            pass

    def update_generation(
        self,
        product: str,
        fingerprint: str,
        unless_changed: dict[str, Any] | None = None,
        **values: Any,
    ) -> bool:
        """Write `values` to the generation's record. With `unless_changed` (column: the value
        the caller read), only while every such column still holds that value: a compare and
        set, so a write computed from a stale read never undoes a concurrent run's. Returns
        whether the record was written."""
        conditions = [
            generations.c[column] == value for column, value in (unless_changed or {}).items()
        ]
        with self.engine.begin() as conn:
            written = conn.execute(
                generations.update()
                .where(
                    generations.c.product == product,
                    generations.c.fingerprint == fingerprint,
                    *conditions,
                )
                .values(updated_at=time.time(), **values)
            )
        return written.rowcount > 0

    def switch_live(self, product: str, fingerprint: str, audit: dict[str, Any]) -> str | None:
        """Retire the live generation and make `fingerprint` live, with its audit entry, in
        one transaction: readers see the old live generation or the new one, never neither.
        Returns the previous live generation's table (None if there was none). Two reviews
        that promote the same generation at once switch it once: the second finds it live,
        retires nothing and writes no audit entry."""
        now = time.time()
        others_live = (
            generations.c.product == product,
            generations.c.state == LIVE,
            generations.c.fingerprint != fingerprint,
        )
        with self.engine.begin() as conn:
            previous = conn.execute(
                sa.select(generations.c.index_name).where(*others_live)
            ).scalar()
            conn.execute(
                generations.update()
                .where(*others_live)
                .values(state=RETIRED, retired_at=now, updated_at=now)
            )
            switched = conn.execute(
                generations.update()
                .where(
                    generations.c.product == product,
                    generations.c.fingerprint == fingerprint,
                    generations.c.state != LIVE,
                )
                .values(state=LIVE, promoted_at=now, retired_at=None, updated_at=now)
            ).rowcount
            if switched:
                conn.execute(audit_log.insert().values(at=now, from_index=previous, **audit))
        return previous

    def record_audit(self, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(audit_log.insert().values(at=time.time(), **values))

    def audit_entries(self, product: str | None = None) -> list[AuditEntry]:
        query = sa.select(audit_log).order_by(audit_log.c.id)
        if product is not None:
            query = query.where(audit_log.c.product == product)
        with self.engine.connect() as conn:
            return [AuditEntry(**_by_key(audit_log, row)) for row in conn.execute(query)]
