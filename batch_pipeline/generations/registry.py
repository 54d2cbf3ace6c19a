"""Generations: one LanceDB table per product and fingerprint.

A fingerprint change never rewrites the live table: the pipeline builds a new generation
beside it (`building`), which becomes a `candidate` once a full pass has landed every document
(or recorded it as failed for a reason in its content) and nothing is pending. Promotion makes
a candidate `live` and the old live generation `retired`, in one transaction: readers follow
the `live` row. Every promotion, rollback, drop, invalidation and restore is written to the
audit log.
"""

import getpass
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from batch_pipeline.state.tracking import AuditEntry, GenerationRecord, TrackingStore

BUILDING, CANDIDATE, LIVE, RETIRED, DROPPED = "building", "candidate", "live", "retired", "dropped"


class GenerationError(RuntimeError):
    """An operator action that cannot be done; the message says why."""


@dataclass(frozen=True)
class LiveSwitch:
    """What a promotion or rollback changed: the live table before and after."""

    previous: str | None
    live: str
    action: str = "promote"


def current_actor() -> str:
    return os.environ.get("BATCH_PIPELINE_ACTOR") or getpass.getuser()


def _details(details: dict | str | None) -> str | None:
    if isinstance(details, str) or details is None:
        return details
    return json.dumps(details, sort_keys=True, default=str)


class GenerationRegistry:
    """The rules of a product's generations, over the tracking store's records."""

    def __init__(self, tracking: TrackingStore) -> None:
        self.tracking = tracking

    def get(self, product: str, fingerprint: str) -> GenerationRecord | None:
        return self.tracking.generation(product, fingerprint)

    def live(self, product: str) -> GenerationRecord | None:
        return self.tracking.live_generation(product)

    @staticmethod
    def unregistered(product: str, fingerprint: str, index: str, built: dict) -> GenerationRecord:
        """A generation's record as it would be registered, without registering it (a
        baseline scored for the gate and never built, say)."""
        return GenerationRecord(
            product=product,
            fingerprint=fingerprint,
            index_name=index,
            state="building",
            model_config=json.dumps(built, sort_keys=True),
            full_pass=False,
            full_passes=None,
            documents=0,
            rows=0,
            complete=False,
            scores=None,
            decision=None,
            created_at=0.0,
            updated_at=0.0,
            promoted_at=None,
            retired_at=None,
        )

    def list_all(self, product: str | None = None) -> list[GenerationRecord]:
        return self.tracking.list_generations(product)

    def ensure(
        self, product: str, fingerprint: str, index: str, model_config: dict
    ) -> GenerationRecord:
        """The generation's record, registered (as `building`) on first use."""
        record = self.get(product, fingerprint)
        if record is not None:
            return record
        now = time.time()
        self.tracking.insert_generation(
            {
                "product": product,
                "fingerprint": fingerprint,
                "index_name": index,
                "state": BUILDING,
                "model_config": json.dumps(model_config, sort_keys=True),
                "full_pass": False,
                "documents": 0,
                "rows": 0,
                "complete": False,
                "created_at": now,
                "updated_at": now,
            }
        )
        return self.get(product, fingerprint)

    def update(
        self,
        product: str,
        fingerprint: str,
        unless_changed: dict[str, Any] | None = None,
        **values: Any,
    ) -> bool:
        """Write `values` to the generation's record (with `unless_changed`, only while those
        columns still hold what the caller read); whether it was written."""
        return self.tracking.update_generation(product, fingerprint, unless_changed, **values)

    def record(
        self,
        action: str,
        product: str,
        from_index: str | None = None,
        to_index: str | None = None,
        details: dict | str | None = None,
        actor: str | None = None,
    ) -> None:
        """Write an operator or pipeline action to the audit log."""
        self.tracking.record_audit(
            actor=actor or current_actor(),
            action=action,
            product=product,
            from_index=from_index,
            to_index=to_index,
            details=_details(details),
        )

    def audit_log(self, product: str | None = None) -> list[AuditEntry]:
        return self.tracking.audit_entries(product)

    def promote(
        self,
        product: str,
        fingerprint: str,
        reason: str,
        actor: str | None = None,
        already_live_ok: bool = False,
    ) -> LiveSwitch:
        """Make this generation live and retire the old one: one atomic switch. A generation
        that is live already is an error for an operator, and nothing to do for a pipeline
        review (`already_live_ok`: a concurrent run's review promoted it first)."""
        target = self.get(product, fingerprint)
        if target is None:
            raise GenerationError(f"product {product!r} has no generation {fingerprint!r}")
        if target.state == LIVE:
            if already_live_ok:
                return LiveSwitch(target.index_name, target.index_name)
            raise GenerationError(f"generation {fingerprint} of {product!r} is already live")
        if target.state == DROPPED:
            raise GenerationError(f"generation {fingerprint} was dropped; rebuild it")
        previous = self.tracking.switch_live(
            product,
            fingerprint,
            audit={
                "actor": actor or current_actor(),
                "action": "promote",
                "product": product,
                "to_index": target.index_name,
                "details": reason,
            },
        )
        return LiveSwitch(previous, target.index_name)

    def rollback(self, product: str, actor: str | None = None) -> LiveSwitch:
        """Bring back the most recently retired generation; the live one is retired."""
        retired = [g for g in self.list_all(product) if g.state == RETIRED]
        if not retired:
            raise GenerationError(f"product {product!r} has no retired generation to restore")
        previous = max(retired, key=lambda g: g.retired_at or 0)
        switch = self.promote(product, previous.fingerprint, "rollback", actor)
        return LiveSwitch(switch.previous, switch.live, action="rollback")


def generation_complete(full_pass: bool, pending: int) -> bool:
    """Every document landed or recorded as failed: a full pass finished, nothing pending."""
    return full_pass and pending == 0
