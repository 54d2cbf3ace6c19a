"""int8 for the OpenVINO path: an export quantized by NNCF's post-training quantization,
weights and activations, calibrated on a sample of the collection's own model inputs.

The quantized model is the export's sibling folder, `<export>-int8-<sample>`, named for the
calibration sample's hash, so another sample (another collection, other inputs) makes
another model and the same sample reuses it. NNCF's settings for transformers are used
(`ModelType.TRANSFORMER`: SmoothQuant and fast bias correction, attention's softmax and the
layer norms left in floating point) with the mixed preset (symmetric weights, asymmetric
activations). It is saved as the export is (`openvino_model.save_folder`: beside its final
name, then moved into place, with the SHA-256 of its files), and checked before use like
the export itself (`openvino_model.export_problem`):
one that fails is moved aside and made again, with a warning naming why.

The int8 model runs with OpenVINO's fp32 precision hint: the quantized operations run in
int8 and what lies between them in fp32. On a 2-core Zen 4 (AVX-512 VNNI) that measured
faster than the bf16 hint between them (`benchmarks/NOTES.md`, 2026-12-04).

Measured there (`benchmarks/int8_probe.py`): 1.50x OpenVINO bf16's tokens/s at a minimum
cosine of 0.991 to torch fp32, below the cosine bar `faithful` holds. Whether a collection
may use it is its evaluation's to say, not the cosine's.
"""

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from batch_pipeline.inference.models import discard_folder
from batch_pipeline.inference.openvino_model import (
    INFO_FILE,
    MODEL_FILE,
    export_problem,
    openvino_core,
    save_folder,
)

log = logging.getLogger(__name__)

CALIBRATION_INPUTS = 300  # NNCF's default subset size; the probe calibrated on 300 chunks
PRESET = "mixed"


def sample_key(samples: Sequence[dict[str, np.ndarray]]) -> str:
    """A hash of the calibration sample: every input's token ids, in order."""
    digest = hashlib.sha256()
    for features in samples:
        for name in sorted(features):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(features[name], dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]


def quantized_folder(export: Path, key: str) -> Path:
    """Where the int8 model of `export` calibrated on the sample hashed to `key` lives."""
    return export.with_name(f"{export.name}-int8-{key}")


def quantize_export(export: Path, samples: Sequence[dict[str, np.ndarray]]) -> Path:
    """The int8 model of the OpenVINO export at `export`, calibrated on `samples` (each one
    input's features, named as the export's inputs): read back when it was made from the
    same sample and checks out, made (again) otherwise. Its folder."""
    if not samples:
        raise ValueError("int8 calibration needs at least one input")
    key = sample_key(samples)
    folder = quantized_folder(export, key)
    if (folder / INFO_FILE).is_file():
        problem = export_problem(folder)
        if problem is None:
            return folder
        log.warning("the int8 model %s %s: quantizing again", folder, problem)
        discard_folder(folder)
    names = json.loads((export / INFO_FILE).read_text(encoding="utf-8"))["inputs"]
    core = openvino_core()  # telemetry declined before NNCF imports openvino_telemetry
    import nncf

    source = core.read_model(str(export / MODEL_FILE))
    dataset = nncf.Dataset([{n: np.asarray(s[n], dtype=np.int64) for n in names} for s in samples])
    quantized = nncf.quantize(
        source,
        dataset,
        model_type=nncf.ModelType.TRANSFORMER,
        preset=getattr(nncf.QuantizationPreset, PRESET.upper()),
        subset_size=len(samples),
    )
    about = {"preset": PRESET, "sample": key, "inputs": len(samples), "nncf": nncf.__version__}
    save_folder(quantized, folder, {"inputs": names, "quantized": about}, "the int8 model")
    return folder
