"""The benchmark's roofline: FLOP per cycle by CPU, and the clock both as the kernel reports it
and as a core runs it (a chain of dependent adds, measured in the thread's CPU time)."""

import platform

import pytest

from batch_pipeline.bench import anchors as bench_anchors
from batch_pipeline.bench.anchors import Roofline, measured_clock_ghz

X86_64 = platform.machine() in {"x86_64", "AMD64"}


@pytest.mark.skipif(not X86_64, reason="the add chain is x86-64 code")
def test_the_clock_is_measured_from_a_chain_of_one_cycle_adds():
    clock = measured_clock_ghz(loops=2_000_000, repeats=3)
    assert clock is not None and 0.3 < clock < 8.0  # a real core's GHz, not a count gone wrong


@pytest.mark.skipif(not X86_64, reason="the add chain is x86-64 code")
def test_a_chain_faster_than_any_clock_gives_no_clock(monkeypatch):
    ticks = iter(range(0, 10**9, 1000))  # 1 us for 16 million adds: "16,000 GHz"
    monkeypatch.setattr(bench_anchors.time, "thread_time_ns", lambda: next(ticks))
    assert measured_clock_ghz(loops=2_000_000, repeats=2) is None


def test_no_clock_is_measured_off_x86_64(monkeypatch):
    monkeypatch.setattr(bench_anchors.platform, "machine", lambda: "aarch64")
    assert measured_clock_ghz() is None
    assert measured_clock_ghz(loops=0) is None  # zero loops would run 2**64 times


def test_the_roofline_at_the_nominal_and_the_measured_clock():
    roof = Roofline(2, 2.6, 64, 128, "AVX-512", measured_clock_ghz=3.4)
    assert roof.flops("bfloat16") == pytest.approx(2 * 2.6e9 * 128)
    assert roof.flops("bfloat16", measured=True) == pytest.approx(2 * 3.4e9 * 128)
    assert roof.flops("float32", measured=True) == pytest.approx(2 * 3.4e9 * 64)
    assert "2.60 GHz nominal (3.40 GHz measured)" in roof.describe()
    unmeasured = Roofline(2, 2.6, 32, None, "AVX2")
    assert unmeasured.flops("float32", measured=True) is None
    assert unmeasured.flops("bfloat16") is None  # no bf16 on this CPU
    assert "measured" not in unmeasured.describe()


def test_the_int8_roofline_is_twice_bf16_where_there_are_bf16_dot_products(monkeypatch):
    monkeypatch.setattr(bench_anchors, "cpu_flags", lambda: {"avx512f", "avx512_vnni"})
    assert Roofline(2, 2.6, 32, 64, "Zen 4").flops("int8") == pytest.approx(2 * 2.6e9 * 128)
    assert Roofline(2, 2.6, 64, 1024, "AMX").int8_flop_per_cycle == 2048
    assert Roofline(2, 2.6, 64, None, "VNNI alone").int8_flop_per_cycle == 256
    monkeypatch.setattr(bench_anchors, "cpu_flags", lambda: {"avx2", "fma"})
    assert Roofline(2, 2.6, 32, None, "AVX2").int8_flop_per_cycle == 64
