"""int8 for the OpenVINO path (`inference/quantize.py`), on the real all-MiniLM-L6-v2: NNCF
quantizes the export on a calibration sample; the int8 model's vectors stay close to torch
fp32's; the same sample reuses it, another makes another; a damaged one is made again."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from batch_pipeline.inference.runner import EmbeddingRunner

pytest.importorskip("nncf")

REPO = Path(__file__).resolve().parents[2]
CHUNKS = [json.loads(line)["text"] for line in (REPO / "benchmarks" / "chunks.jsonl").open()]
CALIBRATION, PROBE = CHUNKS[:48], CHUNKS[100:132]


@pytest.fixture(scope="module")
def export(model, tmp_path_factory):
    """The model's OpenVINO export, made by the runner as a run makes it."""
    exports = tmp_path_factory.mktemp("exports")
    EmbeddingRunner(model, device="cpu", backend="openvino", dtype="float32", export_cache=exports)
    (folder,) = exports.iterdir()
    return folder


def features(runner, texts):  # noqa: ANN001, ANN201
    tokenized = runner.model.tokenizer(texts, padding=True, truncation=True, return_tensors="np")
    return {name: np.asarray(values, dtype=np.int64) for name, values in tokenized.items()}


def one_each(runner, texts):  # noqa: ANN001, ANN201
    return [features(runner, [text]) for text in texts]


def test_the_int8_model_stays_close_to_fp32_and_is_made_once_per_sample(
    export, runner, monkeypatch
):
    from batch_pipeline.inference import quantize
    from batch_pipeline.inference.openvino_model import OpenVinoModel, export_problem

    sample = one_each(runner, CALIBRATION)
    folder = quantize.quantize_export(export, sample)
    assert folder.name.startswith(f"{export.name}-int8-") and export_problem(folder) is None
    info = json.loads((folder / "export.json").read_text())
    assert info["quantized"]["inputs"] == 48 and info["quantized"]["preset"] == "mixed"
    int8 = OpenVinoModel(folder, threads=2)
    ours = np.concatenate([int8.infer(f, "float32") for f in one_each(runner, PROBE)])
    reference = runner.model.encode(PROBE, batch_size=32, convert_to_numpy=True)
    cosines = np.sum(ours * reference, 1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1)
    )
    assert 0.97 < float(cosines.min()) < 0.99999  # quantized: close, and not fp32 itself
    xml = (folder / "model.xml").read_text()
    assert xml.count('type="FakeQuantize"') >= 30  # activations quantized, not weights alone
    assert 'element_type="i8"' in xml  # and the weights stored as int8

    import nncf

    monkeypatch.setattr(nncf, "quantize", lambda *a, **k: pytest.fail("quantized again"))
    assert quantize.quantize_export(export, sample) == folder  # the same sample: reused
    other = one_each(runner, CHUNKS[200:210])
    assert quantize.quantized_folder(export, other) != folder  # another sample: another model


def test_a_damaged_int8_model_is_made_again_and_says_why(export, runner, caplog):
    from batch_pipeline.inference import quantize
    from batch_pipeline.inference.openvino_model import export_problem

    sample = one_each(runner, CHUNKS[300:316])
    folder = quantize.quantize_export(export, sample)
    weights = folder / "model.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # cut short
    assert "model.bin changed since it was written" in export_problem(folder)
    caplog.set_level(logging.WARNING)
    assert quantize.quantize_export(export, sample) == folder
    assert "model.bin changed since it was written (damaged or replaced): quantizing again" in (
        caplog.text
    )
    assert export_problem(folder) is None
    assert not list(folder.parent.glob(".discarded-*"))
