"""Weights a checkpoint lacks are an error for every model the project loads (round six,
defect 2): transformers would draw the missing tensors at random in each process and say so
only in its load report. The embedding model, a reranker and the encoder a fine-tune starts
from are refused, naming the folder and the tensors; whole folders load as before."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from batch_pipeline.config import ModelConfig
from batch_pipeline.inference.cross_encoder import CrossEncoderScorer
from batch_pipeline.inference.devices import ModelLoadError
from batch_pipeline.inference.models import resolve_model
from batch_pipeline.inference.rerankers import ResolvedReranker
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.inference.weights import MissingWeightsError, every_weight_loaded

DROPPED = "encoder.layer.3.output.dense.weight"


@pytest.fixture()
def cut_model(tmp_path, model):
    """The shipped model's folder with one tensor of its weights gone (a damaged copy)."""
    folder = tmp_path / "cut"
    shutil.copytree(model.path, folder)
    weights = load_file(folder / "model.safetensors")
    weights.pop(DROPPED)
    save_file(weights, folder / "model.safetensors")
    return folder


def test_an_embedding_model_missing_a_tensor_is_refused_naming_it(cut_model):
    with pytest.raises(ModelLoadError) as refused:
        EmbeddingRunner(resolve_model(ModelConfig(path=cut_model)), device="cpu", dtype="float32")
    assert f"its weights lack 1 tensors the model needs ({DROPPED})" in str(refused.value)
    assert str(cut_model) in str(refused.value)


def test_the_shipped_model_loads_whole(model):
    runner = EmbeddingRunner(model, device="cpu", dtype="float32")
    assert runner.embed(["a page"]).shape == (1, model.embedding_dimension)


def test_a_reranker_whose_head_is_missing_is_refused_when_its_engine_loads(tmp_path, model):
    """Past the configuration's check (a folder swapped after load, or resolved by hand)."""
    headless = tmp_path / "headless"
    shutil.copytree(model.path, headless)
    config = json.loads((headless / "config.json").read_text())
    config |= {"architectures": ["BertForSequenceClassification"], "num_labels": 1}
    (headless / "config.json").write_text(json.dumps(config))
    scorer = CrossEncoderScorer(ResolvedReranker("headless", headless, "x", 512))
    with pytest.raises(MissingWeightsError, match=r"classifier\.(weight|bias)"):
        scorer.score([("a query", "a document")])


def test_the_guard_reads_the_report_however_quiet_transformers_was_set(cut_model):
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    before = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # as a test builder sets it
    try:
        with pytest.raises(MissingWeightsError), every_weight_loaded(cut_model, "model"):
            SentenceTransformer(str(cut_model), device="cpu", local_files_only=True)
        assert transformers_logging.get_verbosity() == transformers_logging.ERROR  # restored
    finally:
        transformers_logging.set_verbosity(before)
