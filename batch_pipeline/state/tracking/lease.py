"""The landing lease: one run at a time lands into a generation, across processes and hosts.

A lease row in the tracking database (SQLite or PostgreSQL alike): the first insert wins, and a
heartbeat renews the lease while the holder works. A holder that died (SIGKILL, lost node)
stops renewing, so its lease expires; on the same host a dead holder's lease is taken over
at once.
"""

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import leases


class LockTimeoutError(RuntimeError):
    """Another run held the generation's landing lease for too long."""


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


def _acquire(engine: Engine, index: str, owner: str, lease_seconds: float) -> None:
    """Take the lease or raise IntegrityError (someone else holds it)."""
    now = time.time()
    with engine.begin() as conn:
        conn.execute(leases.delete().where(leases.c.generation == index, leases.c.expires_at < now))
        holder = conn.execute(
            sa.select(leases.c.owner, leases.c.host, leases.c.pid).where(
                leases.c.generation == index
            )
        ).first()
        if holder is not None and _process_is_gone(holder.host, holder.pid):
            conn.execute(
                leases.delete().where(leases.c.generation == index, leases.c.owner == holder.owner)
            )
        conn.execute(
            leases.insert().values(
                generation=index,
                owner=owner,
                expires_at=now + lease_seconds,
                host=socket.gethostname(),
                pid=os.getpid(),
            )
        )


@contextmanager
def landing_lease(
    engine: Engine, index: str, owner: str, lease_seconds: float = 120, wait_seconds: float = 900
) -> Iterator[None]:
    """Hold generation `index`'s landing lease while the block runs (waiting for it first)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            _acquire(engine, index, owner, lease_seconds)
            break
        except sa.exc.IntegrityError:
            if time.monotonic() > deadline:
                raise LockTimeoutError(
                    f"generation {index!r} is being landed by another run; "
                    f"gave up after {wait_seconds:.0f}s"
                ) from None
            time.sleep(0.2)
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(lease_seconds / 4):
            with engine.begin() as conn:
                conn.execute(
                    leases.update()
                    .where(leases.c.generation == index, leases.c.owner == owner)
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
            conn.execute(
                leases.delete().where(leases.c.generation == index, leases.c.owner == owner)
            )
