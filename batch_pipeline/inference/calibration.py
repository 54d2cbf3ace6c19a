"""`dtype: auto`, decided by measurement: time the candidate dtypes on a sample of the run's
own inputs, compare their vectors with fp32's, and keep the fastest faithful one.

On CPU the candidates are fp32 and bf16, and bf16 is tried only where the CPU reports bf16
instructions (AMX or AVX-512 BF16; elsewhere torch emulates it, slowly). On CUDA they are
bf16 and fp16. A reduced dtype is taken only when its minimum cosine to fp32 on the sample is
at least `fidelity_min_cosine` and it is clearly faster (`MIN_SPEEDUP`) than the default
(fp32 on CPU, bf16 on CUDA). The measurements are cached per device model, torch version,
model and thread count in the state folder, so later runs do not repeat them; the decision
is re-made from them under the fidelity threshold in force. An explicit dtype is never
second-guessed.
"""

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

CALIBRATION_FILE = "calibration.json"  # under the state folder (BATCH_PIPELINE_HOME)
SAMPLE_INPUTS = 64  # the first planned inputs of the run
REPEATS = 2  # timed runs per dtype, after one warm-up; the fastest counts
MIN_SPEEDUP = 1.15  # "clearly faster": at least this ratio over the default dtype


@dataclass(frozen=True)
class Measurement:
    dtype: str
    seconds: float  # the fastest of REPEATS runs over the sample
    inputs: int
    min_cosine: float  # lowest cosine to the fp32 vectors over the sample

    @property
    def inputs_per_second(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class DtypeDecision:
    dtype: str
    reason: str
    measurements: tuple[Measurement, ...] = ()
    cached: bool = False  # taken from an earlier run's measurements
    seconds: float = 0.0  # spent deciding (a cache lookup when cached); not in any throughput

    @property
    def min_cosine(self) -> float | None:
        """The chosen dtype's measured minimum cosine to fp32 (None: not measured)."""
        for m in self.measurements:
            if m.dtype == self.dtype:
                return m.min_cosine
        return 1.0 if self.dtype == "float32" else None

    def metadata(self) -> dict[str, object]:
        values: dict[str, object] = {
            "dtype_decision": self.dtype,
            "dtype_reason": self.reason,
            "dtype_calibration_cached": self.cached,
            "dtype_calibration_seconds": round(self.seconds, 3),
        }
        for m in self.measurements:
            values[f"calibration_{m.dtype}_inputs_per_second"] = round(m.inputs_per_second, 1)
            values[f"calibration_{m.dtype}_min_cosine"] = round(m.min_cosine, 6)
        return values


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float(np.min(np.sum(a * b, axis=1)))


def measure(
    embed_as: Callable[[str, list[str]], np.ndarray],
    texts: list[str],
    dtypes: list[str],
    timer: Callable[[], float] = time.perf_counter,
    repeats: int = REPEATS,
) -> tuple[Measurement, ...]:
    """Time `embed_as(dtype, texts)` for each dtype (one warm-up, then `repeats` runs) and
    compare each dtype's vectors with fp32's."""
    reference = embed_as("float32", texts)
    found = []
    for dtype in dtypes:
        vectors = reference if dtype == "float32" else embed_as(dtype, texts)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            started = timer()
            embed_as(dtype, texts)
            best = min(best, timer() - started)
        found.append(Measurement(dtype, best, len(texts), min_cosine(vectors, reference)))
    return tuple(found)


def decide(
    measurements: tuple[Measurement, ...],
    default: str,
    fidelity_min_cosine: float,
    cached: bool = False,
) -> DtypeDecision:
    """The fastest dtype at least `fidelity_min_cosine` faithful to fp32, if it is at least
    `MIN_SPEEDUP` times as fast as `default`; otherwise `default`."""
    by_dtype = {m.dtype: m for m in measurements}
    faithful = [m for m in measurements if m.min_cosine >= fidelity_min_cosine]
    if not faithful:
        return DtypeDecision(
            "float32",
            f"no candidate reached min cosine {fidelity_min_cosine} to fp32",
            measurements,
            cached,
        )
    best = min(faithful, key=lambda m: m.seconds)
    base = by_dtype.get(default)
    if best.dtype == default or base is None or base.min_cosine < fidelity_min_cosine:
        reason = f"{best.dtype} was the fastest faithful dtype"
        return DtypeDecision(best.dtype, reason, measurements, cached)
    speedup = base.seconds / best.seconds if best.seconds else float("inf")
    if speedup >= MIN_SPEEDUP:
        reason = (
            f"{best.dtype} ran {speedup:.2f}x as fast as {default} with min cosine "
            f"{best.min_cosine:.6f} >= {fidelity_min_cosine}"
        )
        return DtypeDecision(best.dtype, reason, measurements, cached)
    reason = (
        f"{best.dtype} was only {speedup:.2f}x as fast as {default} "
        f"(needs {MIN_SPEEDUP}x); kept {default}"
    )
    return DtypeDecision(default, reason, measurements, cached)


class CalibrationCache:
    """Measurements by machine, torch version, model and threads, in one JSON file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @staticmethod
    def key(**parts: object) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]

    def _entries(self) -> dict:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # a torn or foreign file: measure again

    def get(self, key: str) -> tuple[Measurement, ...] | None:
        entry = self._entries().get(key)
        if not entry:
            return None
        return tuple(Measurement(**m) for m in entry["measurements"])

    def put(self, key: str, measurements: tuple[Measurement, ...], about: dict) -> None:
        if self.path is None:
            return
        entries = self._entries()
        entries[key] = {"about": about, "measurements": [asdict(m) for m in measurements]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(entries, indent=2, sort_keys=True), encoding="utf-8")
        temporary.replace(self.path)


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def cpu_has_bf16_instructions() -> bool:
    """Whether the CPU reports bf16 instructions (AMX-BF16 or AVX-512 BF16): only then is
    bf16 worth measuring. The decision itself is made by measuring."""
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})
