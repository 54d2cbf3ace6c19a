"""An `Embedder` on vLLM's offline engine (`LLM.embed`), in this process: the `vllm` embedding
executor's engine.

It takes the plan's batches as they are, as token ids (the tokenizer already cut them at the
model's max sequence length, special tokens included), so its vectors are of the very inputs
the `local` executor embeds; vLLM schedules them itself (continuous batching, no padding).
Pooling and normalisation are the model's own (its sentence-transformers modules), with
normalisation as `ResolvedModel.normalize` says. `dtype: auto` is fp32 on CPU, the reference
the `local` executor's vectors are measured against, and fp16 on a GPU.
"""

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batch_pipeline.inference.embedder import PlannedBatch, RunStats
from batch_pipeline.inference.models import ModelNotAvailableError, ResolvedModel, load_tokenizer
from batch_pipeline.inference.vllm_engine import start_engine

DTYPES = {"auto": None, "float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


@dataclass(frozen=True)
class EmbedEngineSettings:
    """How a vLLM engine for an embedding model is built."""

    device: str = "cpu"  # cpu or cuda
    dtype: str = "float32"  # resolved: never auto here
    kv_cache_gib: int = 1  # whole GiB of host memory (CPU): vLLM's scheduling space
    gpu_memory_utilization: float = 0.5
    max_num_seqs: int = 256  # inputs in flight at once
    enforce_eager: bool = True

    @property
    def engine_options(self) -> dict[str, object]:
        if self.device == "cuda":
            return {"gpu_memory_utilization": self.gpu_memory_utilization}
        return {"kv_cache_memory_bytes": int(self.kv_cache_gib * (1 << 30))}


def start_pooling_engine(
    folder: Path,
    what: str,
    settings: EmbedEngineSettings,
    max_model_len: int,
    error: type[Exception],
):  # noqa: ANN201 - vllm.LLM
    """vLLM's engine over a pooling model (an embedder, a reranker) at `folder`, on these
    settings, in this process (`vllm_engine.start_engine`)."""
    return start_engine(
        folder,
        what,
        settings.device,
        settings.kv_cache_gib,
        error,
        runner="pooling",
        dtype=settings.dtype,
        max_model_len=max_model_len,
        max_num_seqs=settings.max_num_seqs,
        enforce_eager=settings.enforce_eager,
        seed=0,
        **settings.engine_options,
    )


def settings_problem(device: str, dtype: str) -> tuple[str, str] | None:
    """(the setting, why) when vLLM cannot embed on `device` in `dtype`, found without
    loading anything; None when it can."""
    if dtype not in DTYPES:
        return "dtype", (
            f"{dtype!r} does not run on vLLM; give one of {', '.join(DTYPES)} "
            "(int8 runs on the local executor's OpenVINO backend)"
        )
    if device == "mps":
        return "device", "mps does not run vLLM; give cpu or cuda, or executor local"
    return None


def embed_engine_settings(device: str = "auto", dtype: str = "auto") -> EmbedEngineSettings:
    """The engine's settings for the inference settings `device` and `dtype` (the CLI's
    `--device`/`--dtype`, the inference resource's fields); a ValueError naming the setting
    vLLM cannot run (`settings_problem`)."""
    problem = settings_problem(device, dtype)
    if problem is not None:
        raise ValueError(" ".join(problem))
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    resolved = "cuda" if device.startswith("cuda") else "cpu"
    chosen = DTYPES[dtype] or ("float16" if resolved == "cuda" else "float32")
    return EmbedEngineSettings(device=resolved, dtype=chosen)


class VllmEmbedder:
    """An `Embedder` on `vllm.LLM` (see the module docstring); the engine starts on the first
    batch."""

    backend = "vllm"
    calibrating = False  # nothing to choose: the dtype is the settings'

    def __init__(self, resolved: ResolvedModel, settings: EmbedEngineSettings) -> None:
        self.resolved = resolved
        self.settings = settings
        self.device = settings.device
        self.dtype = settings.dtype
        self.dimension = resolved.embedding_dimension
        self.load_seconds = 0.0
        self._llm = None
        self._tokenizer = None

    def calibrate(self, texts: list[str]) -> None:
        return None

    def engine(self):  # noqa: ANN201 - vllm.LLM
        if self._llm is None:
            started = time.perf_counter()
            s = self.settings
            self._llm = start_pooling_engine(
                self.resolved.path,
                "the embedding model",
                s,
                self.resolved.max_seq_length,
                ModelNotAvailableError,
            )
            self.load_seconds = time.perf_counter() - started
        return self._llm

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Texts as the plan would give them: the model's tokenizer, cut at its max length."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.resolved.path)
        encoded = self._tokenizer(texts, truncation=True, max_length=self.resolved.max_seq_length)
        return [list(ids) for ids in encoded["input_ids"]]

    def run(
        self, batches: Iterable[PlannedBatch], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        from vllm import PoolingParams

        stats = stats if stats is not None else RunStats()
        llm = self.engine()
        params = PoolingParams(use_activation=self.resolved.normalize)
        for batch in batches:
            positions, texts = batch[0], batch[1]
            ids = [list(i) for i in batch[2]] if len(batch) > 2 else self.token_ids(texts)
            started = time.perf_counter()
            outputs = llm.embed(
                [{"prompt_token_ids": i} for i in ids], pooling_params=params, use_tqdm=False
            )
            vectors = np.asarray([o.outputs.embedding for o in outputs], dtype=np.float32)
            stats.seconds += time.perf_counter() - started
            tokens = sum(len(i) for i in ids)
            stats.inputs += len(positions)
            stats.tokens += tokens
            stats.padded_tokens += tokens  # vLLM packs sequences: nothing is padded
            stats.batches += 1
            yield list(positions), vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        batch = (list(range(len(texts))), texts, self.token_ids(texts))
        return np.concatenate([vectors for _positions, vectors in self.run([batch])])
