"""`dtype: auto` and `backend: auto`, decided by measurement: time the candidate paths (a
backend and a dtype) on a small sample of the run's own median-length inputs, compare their
vectors with torch fp32's, and keep the fastest faithful one.

On CPU the candidates are torch fp32 and bf16, and OpenVINO fp32 and bf16 where openvino is
installed (`batch_pipeline.inference.openvino_model`). torch bf16 is tried only where the CPU
reports bf16 instructions (AMX or AVX-512 BF16; elsewhere torch emulates it, slowly), OpenVINO
bf16 only where its CPU plugin lists BF16. On CUDA they are torch bf16 and fp16. A candidate
other than the default (torch fp32 on CPU, torch bf16 on CUDA) is taken only when its minimum
cosine to torch fp32 on the sample is at least `fidelity_min_cosine` and it is clearly faster
(`MIN_SPEEDUP`) than the default. The candidates are timed in alternating rounds, so a
machine that slows down mid-measurement does not favour whichever ran first, and the
candidates within `CONTENTION` of the fastest get `CONTEST_ROUNDS` more: a slowdown that
spans both of a path's first rounds (a neighbour on a shared host) would otherwise make the
decision, and the cache would keep it. The
measurements are cached per device model, torch and OpenVINO versions, model and thread
count in the state folder, so later runs do not repeat them; the decision is re-made from
them under the fidelity threshold in force. An explicit dtype or backend is never
second-guessed: it only narrows the candidates.
"""

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

CALIBRATION_FILE = "calibration.json"  # under the state folder (BATCH_PIPELINE_HOME)
SAMPLE_INPUTS = 16  # median-length inputs of the run, one batch...
SAMPLE_TOKENS = 1024  # ...of at most this many tokens (long inputs: fewer of them)
MIN_SAMPLE_INPUTS = 4
REPEATS = 2  # timed rounds over every candidate, after one warm-up each; the fastest counts
# then more rounds over the candidates whose fastest time is within this factor of the
# fastest's. On a shared 2-core Zen 4 a noisy neighbour once slowed OpenVINO bf16 2.2x across
# both of its rounds: it measured 1.23x slower than torch bf16, where it runs 1.39x faster
CONTENTION = 2.0
CONTEST_ROUNDS = 1  # each a later chance of a quiet host: 0.4 s on the READMEs' sample on a Zen 4
MIN_SPEEDUP = 1.15  # "clearly faster": at least this ratio over the default path
REFERENCE = ("torch", "float32")  # what every candidate's vectors are compared with

Candidate = tuple[str, str]  # (backend, dtype)


def label(backend: str, dtype: str) -> str:
    """How a path is named in reasons, metadata and reports: `openvino/bfloat16`."""
    return f"{backend}/{dtype}"


@dataclass(frozen=True)
class DtypeMeasurement:
    """One backend and dtype timed on a run's sample, with its fidelity to torch fp32."""

    dtype: str
    seconds: float  # the fastest of its timed runs over the sample
    inputs: int
    min_cosine: float  # lowest cosine to the torch fp32 vectors over the sample
    backend: str = "torch"

    @property
    def candidate(self) -> Candidate:
        return (self.backend, self.dtype)

    @property
    def inputs_per_second(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class DtypeDecision:
    """The path a runner takes: its dtype and its backend, and why."""

    dtype: str
    reason: str
    measurements: tuple[DtypeMeasurement, ...] = ()
    cached: bool = False  # taken from an earlier run's measurements
    seconds: float = 0.0  # spent measuring (a cache lookup when cached); not in any throughput
    backend: str = "torch"
    export_seconds: float = 0.0  # converting the model for a backend, paid once per machine

    @property
    def candidate(self) -> Candidate:
        return (self.backend, self.dtype)

    @property
    def min_cosine(self) -> float | None:
        """The chosen path's measured minimum cosine to torch fp32 (None: not measured)."""
        for m in self.measurements:
            if m.candidate == (self.backend, self.dtype):
                return m.min_cosine
        return 1.0 if (self.backend, self.dtype) == REFERENCE else None

    def summary(self) -> dict[str, object]:
        """The decision as a run's measures keep it (`report`): the path, why, what measuring
        and exporting cost, and every candidate's speed and cosine."""
        return {
            "path": label(self.backend, self.dtype),
            "reason": self.reason,
            "cached": self.cached,
            "seconds": round(self.seconds, 3),
            "export_seconds": round(self.export_seconds, 3),
            "candidates": {
                label(m.backend, m.dtype): {
                    "inputs_per_second": round(m.inputs_per_second, 1),
                    "min_cosine": round(m.min_cosine, 6),
                }
                for m in self.measurements
            },
        }

    def metadata(self) -> dict[str, object]:
        values: dict[str, object] = {
            "dtype_decision": self.dtype,
            "backend_decision": self.backend,
            "dtype_reason": self.reason,
            "dtype_calibration_cached": self.cached,
            "dtype_calibration_seconds": round(self.seconds, 3),
        }
        if self.export_seconds:
            values["backend_export_seconds"] = round(self.export_seconds, 3)
        for m in self.measurements:
            name = f"{m.backend}_{m.dtype}"
            values[f"calibration_{name}_inputs_per_second"] = round(m.inputs_per_second, 1)
            values[f"calibration_{name}_min_cosine"] = round(m.min_cosine, 6)
        return values


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's cosine between `a` and `b`."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return np.sum(a * b, axis=1)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.min(cosines(a, b)))


def median_sample(
    texts: list[str],
    lengths: list[int],
    size: int = SAMPLE_INPUTS,
    budget: int | None = None,
) -> list[str]:
    """Up to `size` of `texts` around their median length, fewer where their `lengths` would
    sum past `budget` (but at least MIN_SAMPLE_INPUTS): what a typical batch holds, at a
    bounded cost (the shortest inputs, which a length-sorted plan starts with, would flatter
    a backend with a small fixed cost per call)."""
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    while True:
        start = max(0, (len(order) - size) // 2)
        chosen = order[start : start + size]
        total = sum(lengths[i] for i in chosen)
        if budget is None or size <= MIN_SAMPLE_INPUTS or total <= budget:
            return [texts[i] for i in chosen]
        size -= 1


def measure(
    embed_as: Callable[[Candidate, list[str]], np.ndarray],
    texts: list[str],
    candidates: list[Candidate],
    timer: Callable[[], float] = time.perf_counter,
    repeats: int = REPEATS,
    contest_rounds: int = CONTEST_ROUNDS,
) -> tuple[DtypeMeasurement, ...]:
    """Time `embed_as(candidate, texts)` for each candidate (one warm-up each, then
    `repeats` rounds over all of them, then `contest_rounds` over those within `CONTENTION`
    of the fastest, in alternating order) and compare each candidate's vectors with the
    reference's (torch fp32)."""
    reference = embed_as(REFERENCE, texts)
    cosines = {}
    for candidate in candidates:  # the warm-up: compiles, allocates, and gives the vectors
        vectors = reference if candidate == REFERENCE else embed_as(candidate, texts)
        cosines[candidate] = min_cosine(vectors, reference)
    best = dict.fromkeys(candidates, float("inf"))

    def timed_round(round_index: int, among: list[Candidate]) -> None:
        for candidate in among if round_index % 2 == 0 else among[::-1]:
            started = timer()
            embed_as(candidate, texts)
            best[candidate] = min(best[candidate], timer() - started)

    for round_index in range(repeats):
        timed_round(round_index, candidates)
    fastest = min(best.values(), default=0.0)
    contenders = [c for c in candidates if best[c] <= fastest * CONTENTION]
    if len(contenders) > 1:
        for round_index in range(repeats, repeats + contest_rounds):
            timed_round(round_index, contenders)
    return tuple(
        DtypeMeasurement(
            dtype, best[(backend, dtype)], len(texts), cosines[(backend, dtype)], backend
        )
        for backend, dtype in candidates
    )


def decide(
    measurements: tuple[DtypeMeasurement, ...],
    default: str | Candidate,
    fidelity_min_cosine: float,
    cached: bool = False,
) -> DtypeDecision:
    """The fastest candidate at least `fidelity_min_cosine` faithful to torch fp32, if it is
    at least `MIN_SPEEDUP` times as fast as `default`; otherwise `default`. A bare dtype as
    `default` means that dtype on torch."""
    default = ("torch", default) if isinstance(default, str) else default
    by_candidate = {m.candidate: m for m in measurements}
    faithful = [m for m in measurements if m.min_cosine >= fidelity_min_cosine]

    def decision(candidate: Candidate, reason: str) -> DtypeDecision:
        backend, dtype = candidate
        return DtypeDecision(dtype, reason, measurements, cached, backend=backend)

    if not faithful:
        return decision(
            REFERENCE, f"no candidate reached min cosine {fidelity_min_cosine} to torch fp32"
        )
    best = min(faithful, key=lambda m: m.seconds)
    base = by_candidate.get(default)
    name, base_name = label(*best.candidate), label(*default)
    if best.candidate == default or base is None or base.min_cosine < fidelity_min_cosine:
        return decision(best.candidate, f"{name} was the fastest faithful path")
    speedup = base.seconds / best.seconds if best.seconds else float("inf")
    if speedup >= MIN_SPEEDUP:
        reason = (
            f"{name} ran {speedup:.2f}x as fast as {base_name} with min cosine "
            f"{best.min_cosine:.6f} >= {fidelity_min_cosine}"
        )
        return decision(best.candidate, reason)
    reason = (
        f"{name} was only {speedup:.2f}x as fast as {base_name} "
        f"(needs {MIN_SPEEDUP}x); kept {base_name}"
    )
    return decision(default, reason)


class CalibrationCache:
    """Measurements by machine, torch and OpenVINO versions, model and threads, in one JSON
    file. An entry is used only if it is a well-formed measurement of exactly the paths the
    caller measures (`get`'s `candidates`): a hand-edited or foreign file (a list, an extra
    key, a `cuda/float16` entry on a CPU, an `openvino/int4` path) is measured again, with a
    warning naming the file, instead of a traceback, a false decision or a refused run."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @staticmethod
    def key(**parts: object) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]

    def _entries(self) -> dict:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # a torn or foreign file: measure again
        if not isinstance(entries, dict):
            self._distrust("it is not a mapping of entries")
            return {}
        return entries

    def _distrust(self, why: str) -> None:
        log.warning(f"{self.path}: {why}; measuring again (the file is rewritten)")

    def get(
        self, key: str, candidates: Iterable[Candidate] | None = None
    ) -> tuple[DtypeMeasurement, ...] | None:
        """The measurements cached under `key`, or None: none there, or one that does not
        fit (not a measurement, or not of exactly `candidates`)."""
        entry = self._entries().get(key)
        if not entry:
            return None
        try:
            if not isinstance(entry, dict) or not isinstance(entry.get("measurements"), list):
                raise ValueError("no list of measurements")
            measured = tuple(_measurement(m) for m in entry["measurements"])
        except (TypeError, ValueError) as error:
            self._distrust(f"entry {key} is not a measurement ({error})")
            return None
        if candidates is not None and {m.candidate for m in measured} != set(candidates):
            found = ", ".join(sorted(label(*m.candidate) for m in measured))
            self._distrust(f"entry {key} measured {found}, not the paths this run may take")
            return None
        return measured

    def put(self, key: str, measurements: tuple[DtypeMeasurement, ...], about: dict) -> None:
        if self.path is None:
            return
        entries = self._entries()
        entries[key] = {"about": about, "measurements": [asdict(m) for m in measurements]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(entries, indent=2, sort_keys=True), encoding="utf-8")
        temporary.replace(self.path)


MEASUREMENT_FIELDS = frozenset(DtypeMeasurement.__dataclass_fields__)


def _measurement(value: object) -> DtypeMeasurement:
    """One cached measurement, checked: its fields, their types and ranges (a ValueError
    saying what is wrong otherwise)."""
    if not isinstance(value, dict):
        raise ValueError("a measurement is not a mapping")
    unknown = sorted(set(value) - MEASUREMENT_FIELDS)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}")
    m = DtypeMeasurement(**value)  # a missing field is a TypeError
    number = (int, float)
    if not (isinstance(m.dtype, str) and isinstance(m.backend, str)):
        raise ValueError("dtype and backend must be names")
    if not (isinstance(m.seconds, number) and math.isfinite(m.seconds) and m.seconds > 0):
        raise ValueError(f"seconds {m.seconds!r} is not a positive time")
    if not (isinstance(m.inputs, int) and not isinstance(m.inputs, bool) and m.inputs > 0):
        raise ValueError(f"inputs {m.inputs!r} is not a positive count")
    if not (isinstance(m.min_cosine, number) and -1.0 <= m.min_cosine <= 1.0):
        raise ValueError(f"min_cosine {m.min_cosine!r} is not a cosine")
    return m


def cpuinfo(field: str) -> list[str]:
    """The values of a `/proc/cpuinfo` field, one per logical CPU ([] off Linux)."""
    try:
        with open("/proc/cpuinfo") as handle:
            return [line.split(":", 1)[1].strip() for line in handle if line.startswith(field)]
    except OSError:
        return []


def cpu_flags() -> set[str]:
    return set(next(iter(cpuinfo("flags")), "").split())


def cpu_model_name() -> str:
    names = cpuinfo("model name")
    if names:
        return names[0]
    import platform

    return platform.processor() or platform.machine()


def cpu_has_bf16_instructions() -> bool:
    """Whether the CPU reports bf16 instructions (AMX-BF16 or AVX-512 BF16): only then is
    bf16 worth measuring. The decision itself is made by measuring."""
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})
