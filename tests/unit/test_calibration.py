"""`dtype: auto` and `backend: auto`'s decision logic, with a fake clock and fake vectors (no
model, no real time)."""

import numpy as np
import pytest

from batch_pipeline.inference.calibration import (
    MIN_SPEEDUP,
    CalibrationCache,
    DtypeMeasurement,
    decide,
    measure,
    median_sample,
)

TORCH_FP32, TORCH_BF16 = ("torch", "float32"), ("torch", "bfloat16")
OV_FP32, OV_BF16 = ("openvino", "float32"), ("openvino", "bfloat16")
FOUR = [TORCH_FP32, TORCH_BF16, OV_FP32, OV_BF16]


class FakeClock:
    """FAKE: each call of a path takes the seconds given for it, and returns the reference
    vectors plus that path's noise."""

    def __init__(self, seconds: dict[tuple[str, str], float]) -> None:
        self.seconds = seconds
        self.now = 0.0
        self.calls: list[tuple[str, str]] = []

    def __call__(self) -> float:
        return self.now

    def embed_as(self, noise: dict[tuple[str, str], float]):  # noqa: ANN201
        base = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)

        def embed(candidate: tuple[str, str], texts: list[str]) -> np.ndarray:
            self.calls.append(candidate)
            self.now += self.seconds[candidate]
            jitter = np.random.default_rng(1).normal(size=base.shape)
            return base + noise.get(candidate, 0.0) * jitter

        return embed


def test_measure_times_four_paths_in_alternating_rounds_against_torch_fp32():
    clock = FakeClock({TORCH_FP32: 2.0, TORCH_BF16: 1.1, OV_FP32: 1.5, OV_BF16: 0.8})
    found = measure(clock.embed_as({TORCH_BF16: 1e-3, OV_BF16: 1e-3}), ["t"] * 8, FOUR, clock)
    by = {m.candidate: m for m in found}
    assert {c: by[c].seconds for c in FOUR} == pytest.approx(clock.seconds)
    assert by[TORCH_FP32].min_cosine == pytest.approx(1.0) == by[OV_FP32].min_cosine
    assert 0.999 < by[OV_BF16].min_cosine < 1.0
    assert by[OV_BF16].inputs_per_second == pytest.approx(10.0)
    # the reference, one warm-up per other path, then rounds forwards and backwards; then
    # a contest round over the paths within CONTENTION (2x) of the fastest: not torch fp32
    timed = clock.calls[1 + 3 :]
    assert timed == FOUR + FOUR[::-1] + [TORCH_BF16, OV_FP32, OV_BF16]


def slowed_through_its_first_rounds(clock: FakeClock, candidate: tuple[str, str]):  # noqa: ANN201
    """FAKE: `clock`'s paths, with `candidate` slowed 2.2x through its warm-up and its first
    two rounds (a neighbour on a shared host), then at its own speed."""
    embed = clock.embed_as({TORCH_BF16: 1e-4, OV_BF16: 1e-4})
    slowed = iter(range(3))

    def noisy(path: tuple[str, str], texts: list[str]) -> np.ndarray:
        if path == candidate and next(slowed, None) is not None:
            clock.now += clock.seconds[path] * 1.2
        return embed(path, texts)

    return noisy


def test_a_slowdown_across_a_path_s_first_rounds_is_outlasted_by_the_contest():
    """OpenVINO bf16 slowed 2.2x through both of its first rounds looks 1.2x slower than
    torch bf16. The contest round times it again, once the host is quiet, and it is taken;
    without them torch bf16 would be, and the cache would keep that."""
    seconds = {TORCH_FP32: 3.0, TORCH_BF16: 1.1, OV_FP32: 2.4, OV_BF16: 0.8}
    clock = FakeClock(seconds)
    found = measure(slowed_through_its_first_rounds(clock, OV_BF16), ["t"] * 8, FOUR, clock)
    assert {m.candidate: m.seconds for m in found}[OV_BF16] == pytest.approx(0.8)
    assert decide(found, "float32", 0.9999).candidate == OV_BF16
    # the paths over 2x the fastest (torch fp32, OpenVINO fp32) were timed in two rounds only
    assert [clock.calls.count(c) for c in FOUR] == [1 + 2, 1 + 2 + 1, 1 + 2, 1 + 2 + 1]

    clock = FakeClock(seconds)
    first_rounds = measure(
        slowed_through_its_first_rounds(clock, OV_BF16), ["t"] * 8, FOUR, clock, contest_rounds=0
    )
    assert decide(first_rounds, "float32", 0.9999).candidate == TORCH_BF16


def m(candidate: tuple[str, str], seconds: float, cosine: float) -> DtypeMeasurement:
    backend, dtype = candidate
    return DtypeMeasurement(dtype, seconds, 64, cosine, backend)


def four(torch_bf16: tuple[float, float], openvino_bf16: tuple[float, float]) -> tuple:
    """Torch fp32 at 2.0 s and OpenVINO fp32 at 1.5 s (both faithful), and the two bf16
    paths at the (seconds, min cosine) given."""
    return (
        m(TORCH_FP32, 2.0, 1.0),
        m(TORCH_BF16, *torch_bf16),
        m(OV_FP32, 1.5, 0.9999999),
        m(OV_BF16, *openvino_bf16),
    )


def test_the_fastest_faithful_of_four_paths_is_taken():
    decision = decide(four((1.1, 0.99997), (0.8, 0.99997)), TORCH_FP32, 0.9999)
    assert decision.candidate == OV_BF16 and decision.backend == "openvino"
    assert "openvino/bfloat16 ran 2.50x as fast as torch/float32" in decision.reason
    assert decision.min_cosine == 0.99997
    metadata = decision.metadata()
    assert metadata["backend_decision"] == "openvino" and metadata["dtype_decision"] == "bfloat16"
    assert metadata["calibration_openvino_bfloat16_inputs_per_second"] == 80.0
    assert metadata["calibration_torch_float32_min_cosine"] == 1.0


def test_the_fastest_path_below_the_fidelity_threshold_is_refused_for_the_next():
    measured = four((1.1, 0.99997), (0.8, 0.9990))  # OpenVINO bf16: fastest, not faithful
    assert decide(measured, TORCH_FP32, 0.9999).candidate == TORCH_BF16
    # a stricter threshold refuses both bf16 paths: OpenVINO fp32 is the fastest left
    assert decide(measured, TORCH_FP32, 0.999999).candidate == OV_FP32


def test_torch_stays_where_it_is_the_fastest():
    assert decide(four((0.7, 0.99997), (0.8, 0.99997)), TORCH_FP32, 0.9999).candidate == TORCH_BF16


def test_a_path_that_is_not_clearly_faster_is_refused():
    barely = 2.0 / (MIN_SPEEDUP - 0.05)
    decision = decide((m(TORCH_FP32, 2.0, 1.0), m(OV_FP32, barely, 0.99999)), TORCH_FP32, 0.9999)
    assert decision.candidate == TORCH_FP32 and "needs" in decision.reason


def test_on_cuda_fp16_is_taken_over_bf16_only_when_faithful_and_faster():
    fp16 = ("torch", "float16")
    faster = (m(TORCH_BF16, 1.0, 0.9995), m(fp16, 0.5, 0.99999))
    assert decide(faster, "bfloat16", 0.9999).dtype == "float16"
    unfaithful = (m(TORCH_BF16, 1.0, 0.99995), m(fp16, 0.5, 0.999))
    assert decide(unfaithful, "bfloat16", 0.9999).dtype == "bfloat16"
    neither = (m(TORCH_BF16, 1.0, 0.999), m(fp16, 0.5, 0.998))
    assert decide(neither, "bfloat16", 0.9999).candidate == TORCH_FP32


def test_the_sample_is_of_median_length_not_the_shortest():
    texts = [f"t{i}" for i in range(100)]
    lengths = list(range(100))[::-1]  # t0 is the longest
    sample = median_sample(texts, lengths, size=4)
    assert sorted(lengths[texts.index(t)] for t in sample) == [48, 49, 50, 51]
    assert median_sample(texts[:3], lengths[:3], size=4) == ["t2", "t1", "t0"]


def test_the_cache_keeps_measurements_per_key_and_survives_a_torn_file(tmp_path):
    cache = CalibrationCache(tmp_path / "calibration.json")
    key = cache.key(device="cpu model", torch="2.13.0", openvino="2026.4", model="abc")
    assert cache.get(key) is None
    found = (m(TORCH_FP32, 2.0, 1.0), m(OV_BF16, 1.0, 0.99997))
    cache.put(key, found, {"device": "cpu model"})
    assert cache.get(key) == found
    assert decide(cache.get(key), TORCH_FP32, 0.9999, cached=True).cached
    assert (
        cache.get(cache.key(device="other", torch="2.13.0", openvino="2026.4", model="abc")) is None
    )
    (tmp_path / "calibration.json").write_text("{torn")
    assert cache.get(key) is None


def test_measurements_cached_before_backends_were_measured_read_as_torch(tmp_path):
    path = tmp_path / "calibration.json"
    old = {
        "k": {
            "about": {},
            "measurements": [
                {"dtype": "bfloat16", "seconds": 1.0, "inputs": 64, "min_cosine": 0.99997}
            ],
        }
    }
    import json

    path.write_text(json.dumps(old))
    (found,) = CalibrationCache(path).get("k")
    assert found.candidate == TORCH_BF16


def test_long_inputs_make_a_smaller_sample_within_the_token_budget():
    texts = [f"t{i}" for i in range(100)]
    lengths = [200] * 100
    assert len(median_sample(texts, lengths, size=16, budget=1024)) == 5  # 5 x 200 <= 1024
    assert len(median_sample(texts, [1000] * 100, size=16, budget=1024)) == 4  # the floor
    assert len(median_sample(texts, [10] * 100, size=16, budget=1024)) == 16


@pytest.mark.parametrize(
    ("entries", "said"),
    [
        ([{"k": 1}], "not a mapping of entries"),  # a list: was a traceback
        (
            {
                "k": {
                    "measurements": [
                        {
                            "dtype": "float32",
                            "seconds": 1.0,
                            "inputs": 64,
                            "min_cosine": 1.0,
                            "tuned": True,
                        }
                    ]
                }
            },
            "unknown field 'tuned'",
        ),
        (
            {
                "k": {
                    "measurements": [
                        {"dtype": "float32", "seconds": -1, "inputs": 64, "min_cosine": 1.0}
                    ]
                }
            },
            "is not a positive time",
        ),
        ({"k": {"measurements": "fast"}}, "no list of measurements"),
        # a fake cuda entry on a CPU machine: was taken, ran ~10x slower, recorded as cuda
        (
            {
                "k": {
                    "measurements": [
                        {"dtype": "float32", "seconds": 2.0, "inputs": 64, "min_cosine": 1.0},
                        {
                            "dtype": "float16",
                            "seconds": 0.1,
                            "inputs": 64,
                            "min_cosine": 1.0,
                            "backend": "cuda",
                        },
                    ]
                }
            },
            "measured cuda/float16, torch/float32",
        ),
        # a path this machine never measures: every run was refused, with no word of the file
        (
            {
                "k": {
                    "measurements": [
                        {"dtype": "float32", "seconds": 2.0, "inputs": 64, "min_cosine": 1.0},
                        {
                            "dtype": "int4",
                            "seconds": 0.1,
                            "inputs": 64,
                            "min_cosine": 0.5,
                            "backend": "openvino",
                        },
                    ]
                }
            },
            "openvino/int4, torch/float32, not the paths",
        ),
    ],
)
def test_a_cached_entry_that_does_not_fit_is_measured_again_with_a_warning(
    tmp_path, caplog, entries, said
):
    import json

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(entries))
    cache = CalibrationCache(path)
    with caplog.at_level("WARNING"):
        assert cache.get("k", [TORCH_FP32, TORCH_BF16]) is None
    assert said in caplog.text and str(path) in caplog.text and "measuring again" in caplog.text
    fresh = (m(TORCH_FP32, 2.0, 1.0), m(TORCH_BF16, 1.0, 0.99997))
    cache.put("k", fresh, {})  # the measurement that follows replaces the entry
    assert cache.get("k", [TORCH_FP32, TORCH_BF16]) == fresh
