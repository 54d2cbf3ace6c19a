"""Which device, dtype and backend a run uses: what `auto` may choose between on this
machine (the calibration measures them), how wide a dtype is, and how many threads a run
takes. Needs torch only where it asks the device."""

import os

from batch_pipeline.inference.calibration import Candidate, cpu_has_bf16_instructions
from batch_pipeline.inference.openvino_model import openvino_dtypes, openvino_version

DTYPES = ("auto", "float32", "float16", "bfloat16", "int8")
DEVICES = ("auto", "cuda", "mps", "cpu")
BACKENDS = ("auto", "torch", "openvino")


class ModelLoadError(RuntimeError):
    """The model could not be loaded; the message says what to fix."""


def pick_device(requested: str = "auto") -> str:
    import torch

    if requested not in DEVICES and not requested.startswith("cuda:"):
        raise ValueError(f"device must be one of {DEVICES} or cuda:N, not {requested!r}")
    if requested != "auto":
        if requested.startswith("cuda") and not torch.cuda.is_available():
            raise ModelLoadError(f"device {requested!r} was requested but CUDA is not available")
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(device: str, requested: str = "auto") -> str:
    """The dtype a run starts in: `requested`, or for `auto` the default of the device (fp32
    on CPU, bf16 or else fp16 on CUDA, fp16 on MPS). With `auto` the runner may then switch
    to a faster dtype it measured to be faithful (`batch_pipeline.inference.calibration`)."""
    import torch

    if requested not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {requested!r}")
    if requested == "int8" and device != "cpu":
        raise ValueError(f"dtype int8 runs on the CPU (OpenVINO), not on device {device!r}")
    if requested != "auto":
        return requested
    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if device == "mps":
        return "float16"
    return "float32"


def pick_backend(device: str, requested: str = "auto") -> str:
    """The backend a run starts on: `requested`, or torch for `auto` (which may then move to
    OpenVINO where that measured faster). OpenVINO runs on CPU only."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {requested!r}")
    if requested == "openvino":
        if device != "cpu":
            raise ValueError(f"backend openvino runs on the CPU, not on device {device!r}")
        if openvino_version() is None:
            raise ValueError("backend openvino needs the openvino package: pip install openvino")
        return "openvino"
    return "torch"


def calibration_candidates(
    device: str, backend: str = "auto", dtype: str = "auto", int8: bool = False
) -> list:
    """The (backend, dtype) paths `dtype: auto` measures on this device, among the backends
    `backend` allows; [] where there is no choice to make (one path, or an explicit dtype:
    it runs on the backend given, torch for `auto`). With `int8` (`model.precision:
    fixed_accuracy`), OpenVINO's int8 model is one more, where openvino and nncf are
    installed: whether it is faster on this CPU is for the measurement to say."""
    import torch

    if dtype != "auto":  # an explicit dtype is not measured: it runs on the backend given
        return []
    found: list[Candidate] = []
    if device == "cpu":
        if backend in ("auto", "torch"):
            found += [("torch", "float32")]
            found += [("torch", "bfloat16")] if cpu_has_bf16_instructions() else []
        if backend in ("auto", "openvino"):
            found += [("openvino", d) for d in openvino_dtypes()]
            if int8 and found[-1:] and found[-1][0] == "openvino" and nncf_installed():
                found += [("openvino", "int8")]
    elif device.startswith("cuda") and torch.cuda.is_bf16_supported() and backend != "openvino":
        found += [("torch", "bfloat16"), ("torch", "float16")]
    return found if len(found) > 1 else []


def nncf_installed() -> bool:
    """Whether NNCF, which quantizes the OpenVINO export to int8, can be imported."""
    import importlib.util

    return importlib.util.find_spec("nncf") is not None


def dtype_bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def default_threads() -> int:
    """Intra-op threads: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
