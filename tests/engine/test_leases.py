"""The lease heartbeat rides out a database blip, and a run that may have lost its lease
stops before it lands (it never lands beside the run that took the lease over)."""

import time

import pytest
import sqlalchemy as sa

from batch_pipeline.state.tracking import HeldLease, LeaseLostError, TrackingStore
from batch_pipeline.state.tracking import lease as lease_module
from batch_pipeline.state.tracking.schema import leases
from tests.support import skewed_lease_clock


def test_a_lease_is_lost_once_unrenewed_for_its_term_or_taken():
    held = HeldLease("partition:kb", lease_seconds=120, renewed_at=100.0)
    assert held.lost(now=219.0) is None
    assert "could not be renewed for 121s" in held.lost(now=221.0)
    with pytest.raises(LeaseLostError, match="stopped before landing"):
        held.check(now=221.0)
    held.renewed_at = 221.0  # a renewal went through: nobody took it meanwhile
    held.check(now=222.0)
    held.taken = True
    assert held.lost(now=222.0) == "another run holds it now"


class FlakyEngine:
    """FAULT: the tracking database, unreachable while `down`."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.down = False
        self.refused = 0

    def begin(self):  # noqa: ANN201
        if self.down:
            self.refused += 1
            raise sa.exc.OperationalError("UPDATE collection_locks", {}, ConnectionError("down"))
        return self.engine.begin()


def wait_for(condition, seconds: float = 20.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_heartbeat_renews_again_after_a_blip_and_notices_a_takeover(tmp_path):
    store = TrackingStore(f"sqlite:///{tmp_path / 'tracking.db'}")
    flaky = FlakyEngine(store.engine)
    with lease_module.lease(flaky, "partition:kb", "run-1", lease_seconds=0.4) as held:
        flaky.down = True
        assert wait_for(lambda: flaky.refused >= 3)  # three beats refused: the thread lives
        flaky.down = False
        before = held.renewed_at
        assert wait_for(lambda: held.renewed_at > before)  # renewing again
        assert not held.taken
        with store.engine.begin() as conn:  # another run took the lease over
            conn.execute(leases.update().values(owner="run-2"))
        assert wait_for(lambda: held.taken)
        with pytest.raises(LeaseLostError, match="another run holds it now"):
            held.check()


def test_a_run_that_lost_its_lease_stops_before_landing(make_pipeline, fake_embedder, monkeypatch):
    pipeline = make_pipeline()
    offset = skewed_lease_clock(monkeypatch)

    def runner():  # noqa: ANN202
        offset["s"] += 10_000  # as if the tracking store had not answered for hours
        return fake_embedder

    with pytest.raises(LeaseLostError, match="lost the lease 'partition:handbook'"):
        pipeline.run("run-1", runner)
    assert pipeline.tracking.runs_with_id("run-1") == []  # nothing was landed or recorded
    assert pipeline.store.open(pipeline.index) is None
