"""What `python -m batch_pipeline.bench` measures the project against, besides `encode`: ONNX
Runtime as FastEmbed and Infinity run it, and the CPU's nominal roofline.

- **ONNX Runtime fp32, length-sorted batches of 32.** The loaded sentence-transformers model
  (transformer, pooling, Normalize) exported with torch's dynamo exporter (the TorchScript
  exporter gives wrong vectors for this model under transformers 5, cosine about 0.92),
  cached under the temporary folder by model files and versions, and run on the CPU
  execution provider with one intra-op thread per core. Inputs are sorted by token count and
  cut into batches of 32, each padded to its longest input; tokenising is inside the timer,
  as it is for `encode`.
- **The roofline**: cores x clock x FLOP per cycle per core, for fp32 and bf16, from the CPU's
  vendor, family and flags (`flop_per_cycle`), at two clocks:
  - the nominal clock: the CPU's maximum frequency where the kernel reports it, else its
    `cpu MHz`. Under a hypervisor that is often the base clock (the TSC's), not the clock
    the cores run at;
  - the measured clock (`measured_clock_ghz`): a chain of dependent register adds, one cycle
    each on every x86-64 core, timed in the thread's own CPU time. On a 2-core Zen 5 under
    KVM that reported 2.60 GHz, the cores ran at 3.4 GHz, and OpenVINO's linear layers alone
    ran at 111% of the nominal bf16 peak. The share at the measured clock is the honest one;
    the nominal share is kept because targets were set against it. Both are bounds (a
    vector unit may run slower than the integer clock), not promises.

Needs onnxruntime, onnx and onnxscript for the ONNX anchor (the dev extra); without them the
anchor is skipped and says so.
"""

import ctypes
import logging
import mmap
import platform
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batch_pipeline.inference.calibration import CalibrationCache, cpu_flags, cpuinfo
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.inference.openvino_model import traceable

ANCHOR_BATCH_SIZE = 32


def clock_ghz() -> float | None:
    """The CPU's nominal clock: its maximum frequency, else the `cpu MHz` it reports."""
    try:
        khz = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()
        return int(khz) / 1e6
    except (OSError, ValueError):
        pass
    mhz = [float(v) for v in cpuinfo("cpu MHz") if v]
    return max(mhz) / 1000 if mhz else None


# x86-64, called as uint64_t chain(uint64_t loops): eight adds per loop, each waiting for the
# last (one cycle each); the loop counter runs beside them. Returns 8 x loops. The adds take a
# register, not an immediate: Intel's P-cores since Golden Cove (Alder Lake, Sapphire Rapids)
# resolve 64-bit adds of a small constant at rename, several a cycle with no latency, and a
# chain of `add rax, 1` measured "18.94 GHz" on a Xeon the kernel said ran at 2.60.
_ADD_CHAIN = (
    bytes.fromhex("4889f9")  # mov rcx, rdi
    + bytes.fromhex("31c0")  # xor eax, eax
    + bytes.fromhex("ba01000000")  # mov edx, 1
    + bytes.fromhex("4801d0") * 8  # add rax, rdx
    + bytes.fromhex("48ffc9")  # dec rcx
    + bytes.fromhex("75e3")  # jnz to the first add (29 bytes back)
    + bytes.fromhex("c3")  # ret
)
_ADDS_PER_LOOP = 8
FASTEST_CLOCK_GHZ = 7.0  # above any x86-64 core's clock: a faster "clock" is a chain cut short


def measured_clock_ghz(loops: int = 25_000_000, repeats: int = 5) -> float | None:
    """The clock a core runs at, measured: `loops` x 8 dependent adds (one cycle each) over
    this thread's CPU time, the fastest of `repeats` (the first may still be ramping up).
    None off x86-64 Linux, where a page cannot be made executable, or where the adds ran
    faster than any core's clock (a core that resolves them without executing them)."""
    if sys.platform != "linux" or platform.machine() not in {"x86_64", "AMD64"} or loops < 1:
        return None
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError):  # a kernel that refuses writable and executable pages
        return None
    page.write(_ADD_CHAIN)
    start = ctypes.c_char.from_buffer(page)
    chain = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(ctypes.addressof(start))
    best = 0.0
    for _ in range(repeats):
        began = time.thread_time_ns()
        added = chain(loops)
        spent = time.thread_time_ns() - began
        if added != loops * _ADDS_PER_LOOP or spent <= 0:  # not the loop it should be
            best = 0.0
            break
        best = max(best, added / spent)  # adds per nanosecond: GHz
    del chain, start  # the page cannot close while a pointer into it is alive
    page.close()
    return round(best, 3) if 0 < best <= FASTEST_CLOCK_GHZ else None


def flop_per_cycle() -> tuple[int, int | None, str]:
    """Nominal (fp32, bf16) FLOP per cycle per core, and which row of the table gave them.

    fp32: two FMA pipes of the widest vectors (AVX-512 on Intel and Zen 5: 64; Zen 4 runs
    AVX-512 on 256-bit pipes, and AVX2 with FMA gives 32; else 16). bf16: AMX tiles 1024;
    AVX-512 BF16 dot products 128 on Intel and Zen 5, 64 on Zen 4; none without them."""
    flags = cpu_flags()
    vendor = (cpuinfo("vendor_id") or [""])[0]
    family = int((cpuinfo("cpu family") or ["0"])[0] or 0)
    amd = vendor == "AuthenticAMD"
    full_width = not amd or family >= 26  # Zen 4 (family 25) splits 512-bit work in two
    if "avx512f" in flags:
        fp32, row = (
            (64, "AVX-512, two 512-bit FMA pipes")
            if full_width
            else (
                32,
                "AVX-512 on 256-bit FMA pipes (Zen 4)",
            )
        )
    elif {"avx2", "fma"} <= flags:
        fp32, row = 32, "AVX2, two 256-bit FMA pipes"
    else:
        fp32, row = 16, "SSE"
    bf16: int | None = None
    if "amx_bf16" in flags:
        bf16, row = 1024, row + "; AMX-BF16 tiles"
    elif "avx512_bf16" in flags:
        bf16 = 128 if full_width else 64
        row += "; AVX-512 BF16 dot products"
    return fp32, bf16, row


@dataclass(frozen=True)
class Roofline:
    cores: int
    clock_ghz: float | None  # nominal: what the kernel reports
    fp32_flop_per_cycle: int
    bf16_flop_per_cycle: int | None
    source: str
    measured_clock_ghz: float | None = None  # what a core ran at (`measured_clock_ghz`)

    @property
    def int8_flop_per_cycle(self) -> int:
        """int8 multiply-adds (counted as FLOP) per cycle per core: twice bf16's where the CPU
        has bf16 dot products (AMX-INT8 beside AMX-BF16, AVX-512 VNNI beside AVX-512 BF16);
        four times fp32's with VNNI alone; else twice fp32's (AVX2's pairwise int8 products)."""
        if self.bf16_flop_per_cycle:
            return 2 * self.bf16_flop_per_cycle
        vnni = bool(cpu_flags() & {"avx512_vnni", "avx_vnni"})
        return (4 if vnni else 2) * self.fp32_flop_per_cycle

    def flops(self, dtype: str, measured: bool = False) -> float | None:
        """FLOP/s of this CPU in `dtype` at the nominal clock, or at the measured one (None:
        not offered, or that clock unknown)."""
        per_cycle = {
            "bfloat16": self.bf16_flop_per_cycle,
            "int8": self.int8_flop_per_cycle,
        }.get(dtype, self.fp32_flop_per_cycle)
        clock = self.measured_clock_ghz if measured else self.clock_ghz
        if per_cycle is None or clock is None:
            return None
        return self.cores * clock * 1e9 * per_cycle

    def describe(self) -> str:
        clock = f"{self.clock_ghz:.2f} GHz" if self.clock_ghz else "clock unknown"
        if self.measured_clock_ghz:
            clock += f" nominal ({self.measured_clock_ghz:.2f} GHz measured)"
        bf16 = f"{self.bf16_flop_per_cycle} bf16" if self.bf16_flop_per_cycle else "no bf16"
        return (
            f"{self.cores} cores x {clock} x {self.fp32_flop_per_cycle} fp32 / {bf16} "
            f"FLOP per cycle ({self.source})"
        )


def cpu_roofline(cores: int, measured_clock: float | None = None) -> Roofline:
    fp32, bf16, source = flop_per_cycle()
    return Roofline(cores, clock_ghz(), fp32, bf16, source, measured_clock)


class OnnxRuntimeAnchor:
    """The model in ONNX Runtime, fp32, length-sorted batches of 32 (see the module doc)."""

    name = f"ONNX Runtime fp32, length-sorted batches of {ANCHOR_BATCH_SIZE}"

    def __init__(self, st_model, model: ResolvedModel, threads: int) -> None:  # noqa: ANN001
        import onnxruntime as ort

        self.st_model = st_model
        self.export_seconds = 0.0
        path = self._exported(st_model, model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def _exported(self, st_model, model: ResolvedModel) -> Path:  # noqa: ANN001
        import onnxruntime as ort
        import torch

        key = CalibrationCache.key(
            model=model.files_hash,
            max_seq_length=model.max_seq_length,
            torch=torch.__version__,
            onnxruntime=ort.__version__,
        )
        folder = Path(tempfile.gettempdir()) / "batch-pipeline-onnx" / key
        if (folder / "model.onnx").is_file():
            return folder / "model.onnx"
        folder.parent.mkdir(parents=True, exist_ok=True)
        features = st_model.preprocess(["an example input", "and a second, longer one"])
        module, names = traceable(st_model, features)

        batch = torch.export.Dim("batch", max=4096)
        sequence = torch.export.Dim("sequence", max=model.max_seq_length)
        started = time.perf_counter()
        exporter_log = logging.getLogger("torch.onnx")  # "torchvision is not installed"
        level = exporter_log.level
        exporter_log.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module,
                tuple(features[n] for n in names),
                input_names=names,
                output_names=["sentence_embedding"],
                dynamic_shapes=(({0: batch, 1: sequence},) * len(names),),  # one *tensors
                dynamo=True,
                verbose=False,
            )
        exporter_log.setLevel(level)
        staging = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
        program.save(str(staging / "model.onnx"))  # with its weights beside it
        staging.rename(folder)
        self.export_seconds = time.perf_counter() - started
        return folder / "model.onnx"

    @staticmethod
    def padding_efficiency(token_counts: list[int]) -> float:
        """Real over padded tokens of its batches (sorted by tokens, 32 at a time)."""
        ordered = sorted(token_counts)
        padded = sum(
            len(ordered[i : i + ANCHOR_BATCH_SIZE]) * ordered[i : i + ANCHOR_BATCH_SIZE][-1]
            for i in range(0, len(ordered), ANCHOR_BATCH_SIZE)
        )
        return sum(ordered) / padded if padded else 1.0

    def embed(self, texts: list[str], token_counts: list[int]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: token_counts[i])
        out = np.zeros((len(texts), self.st_model.get_embedding_dimension()), np.float32)
        for start in range(0, len(order), ANCHOR_BATCH_SIZE):
            rows = order[start : start + ANCHOR_BATCH_SIZE]
            features = self.st_model.preprocess([texts[i] for i in rows])
            feeds = {n: features[n].numpy() for n in self.inputs}
            out[rows] = self.session.run(None, feeds)[0]
        return out
