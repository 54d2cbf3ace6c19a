"""The benchmarks' peak memory of a block: kept by the kernel where it can be reset, else
sampled on a thread; both see memory the block took and gave back before it ended."""

import time

import numpy as np
import pytest

from batch_pipeline.measures import memory
from batch_pipeline.measures.memory import PeakRss, rss_bytes

MIB = 2**20


def take_and_give_back(mib: int, hold: float = 0.1) -> None:
    block = np.ones(mib * MIB, dtype=np.uint8)  # every page touched: resident
    time.sleep(hold)
    del block


def test_a_block_s_peak_counts_memory_given_back_before_it_ended():
    before = rss_bytes()
    with PeakRss() as peak:
        take_and_give_back(256)
    assert peak.peak - before >= 200 * MIB
    assert rss_bytes() - before < 100 * MIB  # it was given back: only the peak remembers


def test_each_block_starts_from_the_memory_it_finds_not_an_earlier_peak():
    with PeakRss() as first:
        take_and_give_back(256)
    with PeakRss() as second:
        pass
    if not second.sampled:  # the kernel kept it: the high-water mark was reset between
        assert second.peak < first.peak - 200 * MIB
    assert second.peak < first.peak


def test_where_the_kernel_refuses_the_reset_a_thread_samples(monkeypatch, tmp_path):
    refused = tmp_path / "missing" / "clear_refs"  # writing there fails, as a refusal would
    monkeypatch.setattr(memory, "CLEAR_REFS", refused)
    before = rss_bytes()
    with PeakRss(interval=0.005) as peak:
        take_and_give_back(256, hold=0.2)
    assert peak.sampled
    assert peak.peak - before >= 200 * MIB


@pytest.mark.skipif(not memory.CLEAR_REFS.exists(), reason="Linux only")
def test_on_linux_nothing_runs_beside_the_block():
    import threading

    threads = threading.active_count()
    with PeakRss() as peak:
        during = threading.active_count()
    assert not peak.sampled
    assert during == threads
