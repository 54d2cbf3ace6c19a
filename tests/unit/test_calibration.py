"""`dtype: auto`'s decision logic, with a fake timer and fake vectors (no model, no clock)."""

import numpy as np
import pytest

from batch_pipeline.inference.calibration import (
    MIN_SPEEDUP,
    CalibrationCache,
    Measurement,
    decide,
    measure,
)


class FakeClock:
    """Each timed call of a dtype takes the seconds given for it."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds
        self.now = 0.0
        self.current = "float32"
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now

    def embed_as(self, noise: dict[str, float]):  # noqa: ANN201
        base = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)

        def embed(dtype: str, texts: list[str]) -> np.ndarray:
            self.current = dtype
            self.now += self.seconds[dtype]
            return base + noise.get(dtype, 0.0) * np.random.default_rng(1).normal(size=base.shape)

        return embed


def test_measure_times_each_dtype_and_compares_its_vectors_with_fp32():
    clock = FakeClock({"float32": 2.0, "bfloat16": 1.0})
    found = measure(clock.embed_as({"bfloat16": 1e-3}), ["t"] * 8, ["float32", "bfloat16"], clock)
    by = {m.dtype: m for m in found}
    assert by["float32"].seconds == 2.0 and by["bfloat16"].seconds == 1.0
    assert by["float32"].min_cosine == pytest.approx(1.0)
    assert 0.999 < by["bfloat16"].min_cosine < 1.0
    assert by["bfloat16"].inputs_per_second == 8.0


def m(dtype: str, seconds: float, cosine: float) -> Measurement:
    return Measurement(dtype, seconds, 64, cosine)


def test_a_faster_faithful_dtype_is_taken():
    decision = decide((m("float32", 2.0, 1.0), m("bfloat16", 1.0, 0.99997)), "float32", 0.9999)
    assert decision.dtype == "bfloat16" and "2.00x" in decision.reason
    assert decision.min_cosine == 0.99997
    assert decision.metadata()["calibration_bfloat16_inputs_per_second"] == 64.0


def test_a_faster_dtype_below_the_fidelity_threshold_is_refused():
    decision = decide((m("float32", 2.0, 1.0), m("bfloat16", 1.0, 0.9990)), "float32", 0.9999)
    assert decision.dtype == "float32" and decision.min_cosine == 1.0


def test_a_dtype_that_is_not_clearly_faster_is_refused():
    barely = 2.0 / (MIN_SPEEDUP - 0.05)
    decision = decide((m("float32", 2.0, 1.0), m("bfloat16", barely, 0.99999)), "float32", 0.9999)
    assert decision.dtype == "float32" and "needs" in decision.reason


def test_on_cuda_fp16_is_taken_over_bf16_only_when_faithful_and_faster():
    faster = (m("bfloat16", 1.0, 0.9995), m("float16", 0.5, 0.99999))
    assert decide(faster, "bfloat16", 0.9999).dtype == "float16"
    unfaithful = (m("bfloat16", 1.0, 0.99995), m("float16", 0.5, 0.999))
    assert decide(unfaithful, "bfloat16", 0.9999).dtype == "bfloat16"
    neither = (m("bfloat16", 1.0, 0.999), m("float16", 0.5, 0.998))
    assert decide(neither, "bfloat16", 0.9999).dtype == "float32"


def test_the_cache_keeps_measurements_per_key_and_survives_a_torn_file(tmp_path):
    cache = CalibrationCache(tmp_path / "calibration.json")
    key = cache.key(device="cpu model", torch="2.13.0", model="abc", threads=2)
    assert cache.get(key) is None
    found = (m("float32", 2.0, 1.0), m("bfloat16", 1.0, 0.99997))
    cache.put(key, found, {"device": "cpu model"})
    assert cache.get(key) == found
    assert cache.get(cache.key(device="other", torch="2.13.0", model="abc", threads=2)) is None
    (tmp_path / "calibration.json").write_text("{torn")
    assert cache.get(key) is None
