"""The OpenVINO backend for CPU embedding: the sentence-transformers model exported once to
OpenVINO's format and compiled per precision.

Export: the loaded `SentenceTransformer` (its transformer, pooling and, where the model has
one, its Normalize module, exactly the modules the torch path calls) is traced by
`openvino.convert_model` on example features, with dynamic batch and sequence axes, and saved
with fp32 weights (`save_model` would halve them to fp16 by default, which costs fidelity).
The export is cached under `<cache>/<key>` (`<home>/models/openvino`, or the folder
`BATCH_PIPELINE_OPENVINO_CACHE` names), where the key hashes the model's files, its
sequence limit and normalisation, the OpenVINO version and the CPU; it is written to a
temporary folder and renamed into place, so a crash never leaves half an export. Every later
run reads it back, and only the run that made it reports its seconds.

Check: an export records the SHA-256 of its files. Before a run uses one it checks them, that
OpenVINO reads it, and that it embeds two probe inputs within cosine 0.999 of its source
model (fp32 both); one that fails (a bad block, an interrupted copy of a shared cache, a
truncated file, an export written before the hashes) is moved aside and made again, with a
warning that says why. A fresh export that fails the probe, or one that cannot be written (a
full disk), is an `ExportError` in one line.

Compile: per precision, `INFERENCE_PRECISION_HINT` f32 or bf16 (bf16 only where the plugin
lists BF16 among the CPU's capabilities), the latency hint and the runner's thread count.

OpenVINO is for CPUs; on a GPU the torch path runs. This module imports openvino only when
called, so the rest of the engine runs without it.

Telemetry: OpenVINO's converter sends usage events to Google Analytics (and writes a client
id under `~/intel`) on every `import openvino` and every conversion, unless the user opted
out or `CI=true`. A batch job sends nothing anywhere, so this module declines that consent in
its process before it imports openvino (`telemetry_off`); nothing is written to the home.
"""

import hashlib
import json
import logging
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from batch_pipeline.inference.calibration import CalibrationCache
from batch_pipeline.inference.models import ResolvedModel, discard_folder

logger = logging.getLogger(__name__)

# Where exports are cached when set (a folder shared by several homes, say); else under the
# home, beside the calibration cache
EXPORT_CACHE_ENV = "BATCH_PIPELINE_OPENVINO_CACHE"
MODEL_FILE = "model.xml"  # beside it, model.bin (the weights)
INFO_FILE = "export.json"
PRECISION_HINTS = {"float32": "f32", "bfloat16": "bf16"}


FIDELITY_FLOOR = 0.999  # an export's probe against its source model, both fp32
HASH_CHUNK = 1 << 20


class OpenVinoMissingError(RuntimeError):
    """The OpenVINO backend was asked for, but openvino is not installed."""


class ExportError(RuntimeError):
    """The OpenVINO export could not be written (a full disk, a read-only cache), or a fresh
    one does not embed as its source model does; the message is one line."""


def telemetry_off() -> None:
    """Decline OpenVINO's usage telemetry in this process (see the module doc): every consent
    check answers "declined", including one made already, whatever the home's consent file."""
    try:
        from openvino_telemetry import Telemetry
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:  # no telemetry package: OpenVINO uses its own stub, which sends nothing
        return
    OptInChecker.check = lambda self, *args, **kwargs: ConsentCheckResult.DECLINED
    made = getattr(Telemetry, "_SingletonMetaClass__single_instance", None)
    if made is not None:  # openvino was imported before this process could decline
        made.consent = False


def openvino_module():  # noqa: ANN202
    """The openvino module, imported with its telemetry declined."""
    telemetry_off()
    import openvino

    return openvino


def openvino_version() -> str | None:
    """The installed OpenVINO runtime's version, or None where it is not installed."""
    try:
        openvino = openvino_module()
    except ImportError:
        return None
    return openvino.get_version()


def openvino_core():  # noqa: ANN202
    try:
        ov = openvino_module()
    except ImportError:
        raise OpenVinoMissingError(
            "backend openvino needs the openvino package: pip install openvino"
        ) from None
    return ov.Core()


def openvino_dtypes() -> list[str]:
    """The precisions OpenVINO's CPU plugin offers on this CPU: fp32 always, bf16 where the
    plugin lists BF16 (AMX or AVX-512 BF16; it does not emulate it). [] without openvino."""
    if openvino_version() is None:
        return []
    capabilities = set(openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    return ["float32"] + (["bfloat16"] if "BF16" in capabilities else [])


def export_key(model: ResolvedModel, cpu: str) -> str:
    """What an export depends on: the model's files and settings, OpenVINO and the CPU."""
    return CalibrationCache.key(
        model=model.files_hash,
        max_seq_length=model.max_seq_length,
        normalize=model.normalize,
        openvino=openvino_version(),
        cpu=cpu,
    )


def traceable(st_model, features: dict):  # noqa: ANN001, ANN201
    """The loaded sentence-transformers model as one module of positional tensors (what
    exporters trace), and the tokenizer's tensor names in that order (input_ids,
    attention_mask, token_type_ids where the model has them)."""
    import torch

    names = [name for name, value in features.items() if hasattr(value, "shape")]

    class Embed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = st_model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.inner(dict(zip(names, tensors, strict=True)))["sentence_embedding"]

    return Embed(), names


def export(st_model, features: dict, folder: Path) -> None:  # noqa: ANN001
    """Trace `st_model` on `features` and save it under `folder` (atomically)."""
    import torch
    from transformers.utils import logging as transformers_logging

    ov = openvino_module()

    module, names = traceable(st_model, features)
    example = tuple(features[name] for name in names)
    # tracing warns about Python branches on shapes, and transformers about the config: both
    # are about the trace's generality, which the dynamic axes and the fidelity check cover
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = ov.convert_model(
                module, example_input=example, input=[(-1, -1) for _ in names]
            )
    finally:
        transformers_logging.set_verbosity(verbosity)
    for port, name in zip(converted.inputs, names, strict=True):
        port.get_tensor().set_names({name})
    save_folder(converted, folder, {"inputs": names}, "the OpenVINO export")


def save_folder(model, folder: Path, info: dict, what: str) -> None:  # noqa: ANN001
    """Save an OpenVINO `model` as `folder` (fp32 weights, as traced): written beside it with
    `info` and its files' SHA-256, then moved into place, so a crash never leaves half of
    one; another process's, finished first, is kept. A folder that cannot be written (a full
    disk) is an `ExportError` naming `what`."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
    except OSError as error:
        raise ExportError(
            f"cannot write {what} under {folder.parent}: {error.strerror or error}"
        ) from None
    try:
        openvino_module().save_model(model, str(staging / MODEL_FILE), compress_to_fp16=False)
        recorded = {**info, "sha256": file_hashes(staging)}
        (staging / INFO_FILE).write_text(json.dumps(recorded), encoding="utf-8")
        try:
            staging.rename(folder)
        except OSError:  # another process finished first: keep its folder
            if not (folder / INFO_FILE).is_file():
                raise
    except (OSError, RuntimeError) as error:  # a full disk reaches OpenVINO as a RuntimeError
        raise ExportError(
            f"cannot write {what} under {folder.parent}: "
            f"{getattr(error, 'strerror', None) or str(error).splitlines()[0]}"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


EXPORT_FILES = (MODEL_FILE, "model.bin")


def file_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of the export's files, read a MiB at a time."""
    hashes = {}
    for name in EXPORT_FILES:
        digest = hashlib.sha256()
        with (folder / name).open("rb") as file:
            while chunk := file.read(HASH_CHUNK):
                digest.update(chunk)
        hashes[name] = digest.hexdigest()
    return hashes


def export_problem(folder: Path) -> str | None:
    """Why the export in `folder` must not be used (a file missing, changed or damaged since
    it was written, or written without hashes), or None."""
    try:
        written = json.loads((folder / INFO_FILE).read_text(encoding="utf-8")).get("sha256")
    except (OSError, ValueError, AttributeError):
        return f"has an unreadable {INFO_FILE}"
    if not isinstance(written, dict):
        return "was written without hashes of its files"
    try:
        found = file_hashes(folder)
    except OSError:
        return "lacks one of its files"
    changed = [name for name in EXPORT_FILES if found[name] != written.get(name)]
    if changed:
        return f"has {', '.join(changed)} changed since it was written (damaged or replaced)"
    return None


def fidelity_problem(loaded: "OpenVinoModel", st_model, features: dict) -> str | None:  # noqa: ANN001
    """Why `loaded` does not embed `features` as its source model does (fp32 both, minimum
    cosine under `FIDELITY_FLOOR`), or None."""
    import torch

    with torch.no_grad():
        reference = st_model(dict(features))["sentence_embedding"].float().numpy()
    ours = loaded.infer(features, "float32")
    cosines = np.sum(ours * reference, axis=1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1)
    ).clip(min=1e-12)
    low = float(np.min(cosines))
    if not np.isfinite(low) or low < FIDELITY_FLOOR:
        return (
            f"embeds its probe inputs at a minimum cosine of {low:.4f} to its source model "
            f"(at least {FIDELITY_FLOOR} expected)"
        )
    return None


class OpenVinoModel:
    """An exported model, compiled per precision on first use for one batch at a time (the
    latency hint: every thread on the batch), as calibration times it.

    Several batches in flight do not pay for their risk. On a 2-core Zen 4 in bf16, two
    requests round-robin (`start_async` and `wait`, no callbacks) ran 1.00x to 1.08x one at
    a time. On a 2-core Zen 3 in fp32 an `AsyncInferQueue` with a Python callback ran 1.1x
    to 1.2x, but one CI run hung in it, every thread waiting; `AsyncInferQueue` on dynamic
    shapes hung ultralytics' CI on AMD EPYC runners the same way, and they went synchronous
    too (ultralytics/ultralytics#25921)."""

    def __init__(self, folder: Path, threads: int) -> None:
        self.folder = folder
        self.threads = threads
        self.core = openvino_core()
        self.model = self.core.read_model(str(folder / MODEL_FILE))
        self.inputs: list[str] = json.loads((folder / INFO_FILE).read_text())["inputs"]
        self._requests: dict[str, object] = {}  # one per precision, compiled on first use

    def _request(self, dtype: str):  # noqa: ANN202
        if dtype not in self._requests:
            if dtype not in PRECISION_HINTS:
                raise ValueError(f"backend openvino runs float32 or bfloat16, not {dtype!r}")
            compiled = self.core.compile_model(
                self.model,
                "CPU",
                {
                    "INFERENCE_PRECISION_HINT": PRECISION_HINTS[dtype],
                    "PERFORMANCE_HINT": "LATENCY",
                    "INFERENCE_NUM_THREADS": self.threads,
                },
            )
            self._requests[dtype] = compiled.create_infer_request()
        return self._requests[dtype]

    def _feeds(self, features: dict) -> dict[str, np.ndarray]:
        return {name: np.asarray(features[name], dtype=np.int64) for name in self.inputs}

    def infer(self, features: dict, dtype: str) -> np.ndarray:
        """Sentence embeddings of one tokenised batch, as float32."""
        result = self._request(dtype).infer(self._feeds(features))
        return np.asarray(result[0], dtype=np.float32).copy()


def load_or_export(
    st_model,  # noqa: ANN001
    model: ResolvedModel,
    features: dict,
    cache: Path | None,
    cpu: str,
    threads: int,
) -> tuple[OpenVinoModel, float]:
    """The model's OpenVINO export, from `cache` or made now from `st_model` traced on
    `features`; and the seconds spent exporting (0.0 when the cache had it). Without a
    cache the export goes to a temporary folder for this process."""
    if cache is None:
        cache = Path(tempfile.gettempdir()) / "batch-pipeline-openvino"
    folder = cache / export_key(model, cpu)
    if (folder / INFO_FILE).is_file():
        loaded, problem = _checked(folder, threads, st_model, features)
        if problem is None:
            return loaded, 0.0
        logger.warning("the OpenVINO export %s %s: making it again", folder, problem)
        discard_folder(folder)
    started = time.perf_counter()
    export(st_model, features, folder)
    seconds = time.perf_counter() - started
    loaded, problem = _checked(folder, threads, st_model, features)
    if problem is not None:
        raise ExportError(f"the OpenVINO export just made at {folder} {problem}")
    return loaded, seconds


def _checked(folder: Path, threads: int, st_model, features: dict):  # noqa: ANN001, ANN202
    """The export in `folder` loaded, and why it must not be used (None: it may): its
    files' hashes, that OpenVINO reads it, and a probe against the source model."""
    problem = export_problem(folder)
    if problem is not None:
        return None, problem
    try:
        loaded = OpenVinoModel(folder, threads)
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        return None, f"cannot be read ({type(error).__name__})"
    return loaded, fidelity_problem(loaded, st_model, features)
