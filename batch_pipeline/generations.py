"""Model generations: one LanceDB table per collection and model fingerprint.

A fingerprint change never rewrites the live table: the pipeline builds a new generation
beside it (`building`), which becomes a `candidate` once a full pass has landed every document
(or recorded it as failed) and nothing is pending. Promotion makes a candidate `live` and the
old live generation `retired`, in one transaction: readers follow the `live` row. Every
promotion, rollback, drop, invalidation and restore is written to the audit log.
"""

import getpass
import json
import os
import time
from typing import Any

import sqlalchemy as sa

from batch_pipeline.tracking import TrackingStore, audit_log, generations

BUILDING, CANDIDATE, LIVE, RETIRED, DROPPED = "building", "candidate", "live", "retired", "dropped"


class GenerationError(RuntimeError):
    """An operator action that cannot be done; the message says why."""


def current_actor() -> str:
    return os.environ.get("BATCH_PIPELINE_ACTOR") or getpass.getuser()


class GenerationRegistry:
    def __init__(self, tracking: TrackingStore) -> None:
        self.engine = tracking.engine

    def _rows(self, query: sa.Select) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def get(self, collection: str, fingerprint: str) -> dict[str, Any] | None:
        rows = self._rows(
            sa.select(generations).where(
                generations.c.collection == collection, generations.c.fingerprint == fingerprint
            )
        )
        return rows[0] if rows else None

    def live(self, collection: str) -> dict[str, Any] | None:
        rows = self._rows(
            sa.select(generations).where(
                generations.c.collection == collection, generations.c.state == LIVE
            )
        )
        return rows[0] if rows else None

    def list_all(self, collection: str | None = None) -> list[dict[str, Any]]:
        query = sa.select(generations).order_by(generations.c.collection, generations.c.created_at)
        if collection is not None:
            query = query.where(generations.c.collection == collection)
        return self._rows(query)

    def ensure(self, collection: str, fingerprint: str, index: str, model_config: dict) -> None:
        if self.get(collection, fingerprint) is not None:
            return
        now = time.time()
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    generations.insert().values(
                        collection=collection,
                        fingerprint=fingerprint,
                        index_name=index,
                        state=BUILDING,
                        model_config=json.dumps(model_config, sort_keys=True),
                        full_pass=False,
                        documents=0,
                        rows=0,
                        complete=False,
                        created_at=now,
                        updated_at=now,
                    )
                )
        except sa.exc.IntegrityError:
            pass  # a concurrent run registered it first

    def update(self, collection: str, fingerprint: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                generations.update()
                .where(
                    generations.c.collection == collection,
                    generations.c.fingerprint == fingerprint,
                )
                .values(updated_at=time.time(), **values)
            )

    def audit(
        self,
        conn: sa.Connection,
        action: str,
        collection: str,
        from_index: str | None,
        to_index: str | None,
        details: dict | str | None = None,
        actor: str | None = None,
    ) -> None:
        conn.execute(
            audit_log.insert().values(
                at=time.time(),
                actor=actor or current_actor(),
                action=action,
                collection=collection,
                from_index=from_index,
                to_index=to_index,
                details=details
                if isinstance(details, str) or details is None
                else json.dumps(details, sort_keys=True, default=str),
            )
        )

    def record(self, action: str, collection: str, **kwargs: Any) -> None:
        with self.engine.begin() as conn:
            self.audit(conn, action, collection, **kwargs)

    def audit_log(self, collection: str | None = None) -> list[dict[str, Any]]:
        query = sa.select(audit_log).order_by(audit_log.c.id)
        if collection is not None:
            query = query.where(audit_log.c.collection == collection)
        return self._rows(query)

    def promote(
        self, collection: str, fingerprint: str, reason: str, actor: str | None = None
    ) -> dict[str, Any]:
        """Make this generation live and retire the old one: one atomic switch."""
        target = self.get(collection, fingerprint)
        if target is None:
            raise GenerationError(f"collection {collection!r} has no generation {fingerprint!r}")
        if target["state"] == LIVE:
            raise GenerationError(f"generation {fingerprint} of {collection!r} is already live")
        if target["state"] == DROPPED:
            raise GenerationError(f"generation {fingerprint} was dropped; rebuild it")
        now = time.time()
        with self.engine.begin() as conn:
            previous = conn.execute(
                sa.select(generations.c.index_name).where(
                    generations.c.collection == collection, generations.c.state == LIVE
                )
            ).scalar()
            conn.execute(
                generations.update()
                .where(generations.c.collection == collection, generations.c.state == LIVE)
                .values(state=RETIRED, retired_at=now, updated_at=now)
            )
            conn.execute(
                generations.update()
                .where(
                    generations.c.collection == collection,
                    generations.c.fingerprint == fingerprint,
                )
                .values(state=LIVE, promoted_at=now, retired_at=None, updated_at=now)
            )
            self.audit(conn, "promote", collection, previous, target["index_name"], reason, actor)
        return {"from": previous, "to": target["index_name"]}

    def rollback(self, collection: str, actor: str | None = None) -> dict[str, Any]:
        """Bring back the most recently retired generation; the live one is retired."""
        retired = [g for g in self.list_all(collection) if g["state"] == RETIRED]
        if not retired:
            raise GenerationError(f"collection {collection!r} has no retired generation to restore")
        previous = max(retired, key=lambda g: g["retired_at"] or 0)
        return self.promote(collection, previous["fingerprint"], "rollback", actor) | {
            "action": "rollback"
        }


def generation_complete(full_pass: bool, pending: int) -> bool:
    """Every document landed or recorded as failed: a full pass finished, nothing pending."""
    return full_pass and pending == 0
