"""Leases in the tracking database: one holder at a time, across processes and hosts.

The landing lease lets one run at a time land into a generation; the partition lease lets one
`batch-pipeline run` at a time go through a partition's stages. A lease is a row in the
tracking database (SQLite or PostgreSQL alike): the first insert wins, and a heartbeat renews
it while the holder works. A holder that died (SIGKILL, lost node) stops renewing, so its
lease expires; on the same host a dead holder's lease is taken over at once.

The heartbeat rides out a database blip: a renewal that fails is tried again on the next
beat. A holder whose lease may have expired meanwhile (no renewal for `lease_seconds`), or
was taken by another run, has lost it: `HeldLease.check` says so, and a run checks before it
lands, so it never lands beside the new holder.
"""

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import leases


class LockTimeoutError(RuntimeError):
    """Another run held a lease for too long."""


class LeaseLostError(RuntimeError):
    """A holder's lease expired or was taken while it worked; it must stop."""


@dataclass
class HeldLease:
    """A lease while its block runs: when it was last renewed, and whether it was taken."""

    name: str
    lease_seconds: float
    renewed_at: float  # time.monotonic() of the last renewal the database confirmed
    taken: bool = False  # a renewal found the lease gone, or another run's

    def lost(self, now: float) -> str | None:
        """Why the lease may be someone else's by `now` (a monotonic time), or None."""
        if self.taken:
            return "another run holds it now"
        silent = now - self.renewed_at
        if silent > self.lease_seconds:
            return f"it could not be renewed for {silent:.0f}s (the tracking store did not answer)"
        return None

    def check(self, now: float | None = None) -> None:
        """Raise LeaseLostError if the lease may have been lost."""
        why = self.lost(time.monotonic() if now is None else now)
        if why is not None:
            raise LeaseLostError(
                f"lost the lease {self.name!r}: {why}; stopped before landing, so nothing "
                "of this run landed beside another; run again once the tracking store answers"
            )


def _process_is_gone(host: str | None, pid: int | None) -> bool:
    """True when the holder ran on this host and its process no longer exists."""
    if host != socket.gethostname() or not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _acquire(engine: Engine, name: str, owner: str, lease_seconds: float) -> str | None:
    """Take the lease, or return who holds it."""
    now = time.time()
    try:
        with engine.begin() as conn:
            conn.execute(leases.delete().where(leases.c.name == name, leases.c.expires_at < now))
            holder = conn.execute(
                sa.select(leases.c.owner, leases.c.host, leases.c.pid).where(leases.c.name == name)
            ).first()
            if holder is not None and _process_is_gone(holder.host, holder.pid):
                conn.execute(
                    leases.delete().where(leases.c.name == name, leases.c.owner == holder.owner)
                )
            elif holder is not None:
                return holder.owner
            conn.execute(
                leases.insert().values(
                    name=name,
                    owner=owner,
                    expires_at=now + lease_seconds,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                )
            )
    except sa.exc.IntegrityError:  # taken between our look and our insert
        return "another run"
    return None


@contextmanager
def lease(
    engine: Engine,
    name: str,
    owner: str,
    lease_seconds: float = 120,
    wait_seconds: float = 900,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[HeldLease]:
    """Hold lease `name` while the block runs, waiting for it first (`on_wait` hears once who
    holds it). A heartbeat renews it every quarter of `lease_seconds`, through database
    errors; the block gets the `HeldLease` to check before it commits anything."""
    deadline = time.monotonic() + wait_seconds
    told = False
    while (holder := _acquire(engine, name, owner, lease_seconds)) is not None:
        if on_wait is not None and not told:
            on_wait(holder)
            told = True
        if time.monotonic() > deadline:
            raise LockTimeoutError(
                f"{name!r} is held by {holder} (another run); gave up after {wait_seconds:.0f}s"
            )
        time.sleep(0.2)
    stop = threading.Event()
    held = HeldLease(name, lease_seconds, time.monotonic())

    def heartbeat() -> None:
        while not stop.wait(lease_seconds / 4):
            try:
                with engine.begin() as conn:
                    renewed = conn.execute(
                        leases.update()
                        .where(leases.c.name == name, leases.c.owner == owner)
                        .values(expires_at=time.time() + lease_seconds)
                    ).rowcount
            except sa.exc.SQLAlchemyError:
                continue  # a blip: the next beat tries again; `check` tells when too long
            if not renewed:  # expired, and taken (or cleared) by another run
                held.taken = True
                return
            held.renewed_at = time.monotonic()

    renewer = threading.Thread(target=heartbeat, name="lease-heartbeat", daemon=True)
    renewer.start()
    try:
        yield held
    finally:
        stop.set()
        renewer.join()
        try:
            with engine.begin() as conn:
                conn.execute(leases.delete().where(leases.c.name == name, leases.c.owner == owner))
        except sa.exc.SQLAlchemyError:
            pass  # unreachable: the lease expires by itself
