"""Leases in the tracking database: one holder at a time, across processes and hosts.

The landing lease lets one run at a time land into a generation; the partition lease lets one
`batch-pipeline run` at a time go through a partition's stages. A lease is a row in the
tracking database (SQLite or PostgreSQL alike): the first insert wins, and a heartbeat renews
it while the holder works. A holder that died (SIGKILL, lost node) stops renewing, so its
lease expires; on the same host a dead holder's lease is taken over at once.
"""

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import leases


class LockTimeoutError(RuntimeError):
    """Another run held a lease for too long."""


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
) -> Iterator[None]:
    """Hold lease `name` while the block runs, waiting for it first (`on_wait` hears once who
    holds it). A heartbeat renews it every quarter of `lease_seconds`."""
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

    def heartbeat() -> None:
        while not stop.wait(lease_seconds / 4):
            with engine.begin() as conn:
                conn.execute(
                    leases.update()
                    .where(leases.c.name == name, leases.c.owner == owner)
                    .values(expires_at=time.time() + lease_seconds)
                )

    renewer = threading.Thread(target=heartbeat, name="lease-heartbeat", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        with engine.begin() as conn:
            conn.execute(leases.delete().where(leases.c.name == name, leases.c.owner == owner))
