"""int8 for the OpenVINO path (`inference/quantize.py`), on the real all-MiniLM-L6-v2: NNCF
quantizes the export on a calibration sample; the int8 model's vectors stay close to torch
fp32's; the same sample reuses it, another makes another; a damaged one is made again."""

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from batch_pipeline.inference.openvino_model import EXPORT_CACHE_ENV
from batch_pipeline.inference.runner import EmbeddingRunner
from tests.support import PathClock

if TYPE_CHECKING:
    from batch_pipeline.index.partition import IndexPartition

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
    other_key = quantize.sample_key(other)
    assert quantize.quantized_folder(export, other_key) != folder  # another sample: another model


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


def handbook(root: Path, model: str = "") -> "IndexPartition":
    """The sample handbook as a collection gated on its 38 labelled queries (recall@5 and
    MRR@5 within the default tolerance, 0.02, of live's), with `model` settings."""
    from batch_pipeline.config import load_config
    from batch_pipeline.index.product import open_partition
    from batch_pipeline.state.storage import resolve_storage

    (root / "pipeline.yaml").write_text(
        "collections:\n  - name: handbook\n"
        f'    source: {{kind: filesystem, path: {REPO / "data" / "handbook"}, glob: "**/*.md"}}\n'
        f"    evaluation: {{path: {REPO / 'data' / 'handbook_eval.jsonl'}, k: 5}}\n"
        + (f"model: {{{model}}}\n" if model else "")
    )
    config = load_config(root / "pipeline.yaml")
    return open_partition(config, resolve_storage(str(root / "home")), "handbook")


def test_an_int8_generation_is_gated_promoted_rolled_back_and_refused_when_uncalibrated(
    runner, tmp_path, monkeypatch, capsys
):
    from batch_pipeline.index.search import search
    from batch_pipeline.inference.openvino_backend import OpenVinoBackend

    exports = tmp_path / "exports"

    def int8_runner(model):  # noqa: ANN001, ANN202
        return EmbeddingRunner(model, "cpu", "int8", backend="openvino", export_cache=exports)

    faithful = handbook(tmp_path)
    faithful.run("run-1", runner)
    assert faithful.product.review(lambda m: runner).decision == "live"
    before = [h.doc_id for h in search(faithful.product, "how do I change my password", 5, runner)]

    # the switch to fixed_accuracy is a new generation, built beside live
    fixed = handbook(tmp_path, "precision: fixed_accuracy")
    assert fixed.index != faithful.index
    int8 = int8_runner(fixed.model)
    fixed.run("run-2", lambda: int8)
    sample = sorted((exports / "int8-samples").iterdir())
    assert len(sample) == 1  # pinned from the collection's own inputs, for every later run
    assert fixed.product.live().index == faithful.index  # readers keep live until the gate passes
    assert [
        h.doc_id for h in search(fixed.product, "how do I change my password", 5, runner)
    ] == before
    embedder_for = lambda m: int8 if m == fixed.model else runner  # noqa: E731
    review = fixed.product.review(embedder_for)
    assert review.decision == "promoted", review
    candidate, live = review.scores["candidate"], review.scores["live"]
    assert abs(candidate["recall_at_5"] - live["recall_at_5"]) <= 0.02
    assert abs(candidate["mrr_at_5"] - live["mrr_at_5"]) <= 0.02
    assert fixed.product.live().index == fixed.index
    assert json.loads(fixed.product.record().model_config)["precision"] == "fixed_accuracy"
    # a reader's search loads its own runner: it finds the pinned sample, and pins no query
    monkeypatch.setenv(EXPORT_CACHE_ENV, str(exports))
    assert search(fixed.product, "how do I change my password", 5)
    assert sorted((exports / "int8-samples").iterdir()) == sample

    moved = fixed.product.registry.rollback("handbook")  # back to the faithful generation
    assert (moved.previous, moved.live) == (fixed.index, faithful.index)

    # an int8 model quantized without a real calibration (one empty input) drops recall:
    # built as its own generation, and refused by the same gate
    def no_calibration(self):  # noqa: ANN001, ANN202
        row = np.asarray([[101, 102]], dtype=np.int64)  # [CLS] [SEP]
        return [
            {
                "input_ids": row,
                "attention_mask": np.ones_like(row),
                "token_type_ids": np.zeros_like(row),
            }
        ]

    monkeypatch.setattr(OpenVinoBackend, "sample_features", no_calibration)
    damaged = handbook(tmp_path, "precision: fixed_accuracy, min_cosine: 0.98")
    assert damaged.index not in (faithful.index, fixed.index)
    bad = int8_runner(damaged.model)
    damaged.run("run-3", lambda: bad)
    review = damaged.product.review(lambda m: bad if m == damaged.model else embedder_for(m))
    assert review.decision == "refused" and "worse than live" in review.reason
    assert review.scores["candidate"]["recall_at_5"] < review.scores["live"]["recall_at_5"] - 0.1
    assert damaged.product.live().index == faithful.index

    # generations list shows each generation's precision and the scores its review measured
    from batch_pipeline import cli

    home = ["--config", str(tmp_path / "pipeline.yaml"), "--home", str(tmp_path / "home")]
    assert cli.main([*home, "generations", "list"]) == 0
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()}
    assert "live" in lines[faithful.product.record().fingerprint]
    assert "precision=faithful" in lines[faithful.product.record().fingerprint]
    admitted = lines[fixed.product.record().fingerprint]
    assert "precision=fixed_accuracy" in admitted and "promoted" in admitted
    assert f"recall_at_5 {candidate['recall_at_5']:.4f}" in admitted
    assert "refused: worse than live" in lines[damaged.product.record().fingerprint]


def test_fixed_accuracy_measures_int8_beside_the_other_paths_and_pins_its_sample(
    model, tmp_path, monkeypatch
):
    """A fake timer makes int8 the fastest path; its model, vectors and cosines are real."""
    from dataclasses import replace

    from batch_pipeline.inference import devices
    from batch_pipeline.inference.openvino_backend import read_sample

    monkeypatch.setattr(devices, "cpu_has_bf16_instructions", lambda: False)
    monkeypatch.setattr(devices, "openvino_dtypes", lambda: ["float32"])
    timer = PathClock(
        {("torch", "float32"): 1.0, ("openvino", "float32"): 0.8, ("openvino", "int8"): 0.3}
    )

    def runner_for(resolved, cache="calibration.json"):  # noqa: ANN001, ANN202
        made = EmbeddingRunner(
            resolved,
            "cpu",
            calibration_cache=tmp_path / cache,
            timer=timer,
            export_cache=tmp_path / "exports",
        )
        timer.runner = made
        return made

    faithful = runner_for(model)
    faithful.embed(CHUNKS[:8])
    labels = set(faithful.dtype_decision.summary()["candidates"])
    assert labels == {"torch/float32", "openvino/float32"}  # faithful never offers int8

    fixed = replace(model, precision="fixed_accuracy", min_cosine=0.99)
    auto = runner_for(fixed)
    vectors = auto.embed(CHUNKS[:40])
    decision = auto.dtype_decision
    assert decision.candidate == ("openvino", "int8") == (auto.backend, auto.dtype)
    assert 0.99 <= decision.min_cosine < 0.9999, decision.summary()
    assert "openvino/int8 ran 3.33x as fast as torch/float32" in decision.reason
    (pinned,) = (tmp_path / "exports" / "int8-samples").iterdir()
    assert read_sample(pinned, 30_522, 256) == auto.token_ids(CHUNKS[:40])  # its first inputs

    import nncf

    quantize = nncf.quantize
    monkeypatch.setattr(nncf, "quantize", lambda *a, **k: pytest.fail("quantized again"))
    again = runner_for(fixed)
    again.embed(CHUNKS[100:103])  # other inputs: the pinned sample and its model are reused
    assert again.dtype_decision.cached and again.dtype == "int8"
    np.testing.assert_allclose(again.embed(CHUNKS[:5]), vectors[:5], atol=1e-5)
    monkeypatch.setattr(nncf, "quantize", quantize)

    # a floor above int8's cosine leaves it out: the fastest path that holds it is taken
    strict = runner_for(replace(fixed, min_cosine=0.9999), "strict.json")
    strict.embed(CHUNKS[:40])
    assert strict.dtype_decision.candidate == ("openvino", "float32")


def test_explicit_int8_needs_fixed_accuracy_and_the_cpu(model):
    from batch_pipeline.inference.devices import pick_dtype

    with pytest.raises(ValueError, match="dtype int8 needs model.precision fixed_accuracy"):
        EmbeddingRunner(model, "cpu", "int8")
    with pytest.raises(ValueError, match="dtype int8 runs on the CPU"):
        pick_dtype("cuda", "int8")


def test_int8_is_not_calibrated_on_a_handful_of_inputs(model, tmp_path, caplog):
    """A search's one query must not become the calibration of every later run's model."""
    from dataclasses import replace

    from batch_pipeline.inference.devices import ModelLoadError

    fixed = replace(model, precision="fixed_accuracy")
    explicit = EmbeddingRunner(fixed, "cpu", "int8", backend="openvino", export_cache=tmp_path)
    with pytest.raises(ModelLoadError, match="1 inputs are too few to pin one"):
        explicit.embed(["how do I reset my password"])
    caplog.set_level(logging.WARNING)
    auto = EmbeddingRunner(fixed, "cpu", export_cache=tmp_path, calibration_cache=tmp_path / "c")
    auto.embed(["how do I reset my password"])
    assert "int8 is not measured: no calibration sample is pinned" in caplog.text
    assert auto.dtype != "int8" and not (tmp_path / "int8-samples").exists()


def test_a_pinned_sample_damaged_or_unfit_for_the_model_is_pinned_again_and_says_why(
    model, runner, tmp_path, caplog
):
    """Before, an edited sample quantized another int8 model without a word, and one with an
    input past the model's positions ended every int8 run in OpenVINO's traceback."""
    from batch_pipeline.inference.openvino_backend import OpenVinoBackend, read_sample

    def backend() -> OpenVinoBackend:  # a fresh run's: nothing pinned in memory yet
        return OpenVinoBackend(
            runner.model, model, runner.model.tokenize, runner.token_ids, tmp_path, threads=1
        )

    assert backend().pin(CHUNKS[:40])
    path = backend().sample_path
    pinned = read_sample(path, len(runner.model.tokenizer), model.max_seq_length)
    assert pinned == runner.token_ids(CHUNKS[:40])
    with np.load(path) as data:
        ids, lengths, written = data["ids"], data["lengths"], data["sha256"]

    edited = ids.copy()
    edited[5] += 1
    foreign = np.where(ids == 101, 50_000, ids)  # [CLS] as an id past the vocabulary
    legacy = {"ids": ids, "lengths": lengths}  # as pinned before samples carried a hash
    cases = {
        "changed since it was pinned": {**legacy, "ids": edited, "sha256": written},
        "outside the model's vocabulary of 30,522": {**legacy, "ids": foreign},
        "holds an input of 300 tokens, over the model's 256": {
            "ids": np.concatenate([ids, np.full(300, 2000)]),
            "lengths": np.append(lengths, 300),
        },
        "cannot be read": None,
    }
    caplog.set_level(logging.WARNING)
    for why, arrays in cases.items():
        if arrays is None:
            path.write_bytes(b"PK\x03\x04 not a whole zip")
        else:
            np.savez(path.open("wb"), **arrays)
        caplog.clear()
        again = backend()
        assert again.pin(CHUNKS[50:90])
        assert again._sample == runner.token_ids(CHUNKS[50:90]), why  # this run's inputs
        assert why in caplog.text and "the int8 model changes with it" in caplog.text, why
        assert read_sample(path, len(runner.model.tokenizer), model.max_seq_length) == again._sample
        write = {"ids": ids, "lengths": lengths, "sha256": written}
        np.savez(path.open("wb"), **write)  # the first sample back, for the next case

    # a sample pinned before samples carried a hash is still read where it fits the model
    np.savez(path.open("wb"), ids=ids, lengths=lengths)
    caplog.clear()
    kept = backend()
    assert kept.pin(CHUNKS[50:90]) and kept._sample == pinned and not caplog.text
