"""Stage 4's engine: run planned batches through a sentence-transformers model.

`EmbeddingRunner` loads the model once, on the best device present (CUDA, then MPS, then CPU),
and runs batches under `torch.inference_mode`, or on CPU through the model's OpenVINO export
where that measured faster (`batch_pipeline.inference.openvino_backend`): under
`model.precision: fixed_accuracy` its int8 model is one more path to measure, held to the
model's cosine floor instead of `fidelity_min_cosine`. A batch that carries
its inputs' token ids (the plan's, from prepare) is padded, not tokenised again, and the next
batches are made ready on a worker thread while the model runs
(`batch_pipeline.inference.batch_features`).
On CUDA it uses fp16/bf16, pinned memory and non-blocking copies; a CUDA out-of-memory error
splits the batch in two and lowers the budget for the rest of the run. An input that fails on
its own is reported, not dropped.

This module needs torch and sentence-transformers only (no dagster, no lancedb; openvino only
for that backend), so the GPU check can import it on a bare machine.
"""

import os
import time
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from pathlib import Path

import numpy as np

from batch_pipeline.inference.batch_features import BatchFeatures, Prepared
from batch_pipeline.inference.calibration import (
    CalibrationCache,
    Candidate,
    DtypeDecision,
    cpu_model_name,
    median_sample,
)
from batch_pipeline.inference.devices import (
    ModelLoadError,
    calibration_candidates,
    default_threads,
    pick_backend,
    pick_device,
    pick_dtype,
)
from batch_pipeline.inference.embedder import PlannedBatch, RunStats
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.inference.openvino_backend import OpenVinoBackend
from batch_pipeline.inference.openvino_model import (
    EXPORT_CACHE_ENV,
    ExportError,
    OpenVinoMissingError,
)
from batch_pipeline.inference.quantize import CALIBRATION_INPUTS
from batch_pipeline.inference.runner_calibration import RunnerCalibration
from batch_pipeline.inference.tokens import TokenIds
from batch_pipeline.inference.weights import every_weight_loaded


def is_out_of_memory(error: BaseException) -> bool:
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(error, oom) or "out of memory" in str(error).lower()


class EmbeddingRunner(RunnerCalibration):
    """One loaded model and the settings to run it. Reuse it for every batch of a run."""

    def __init__(
        self,
        model: ResolvedModel,
        device: str = "auto",
        dtype: str = "auto",
        num_threads: int | None = None,
        quantize_int8: bool = False,
        prefetch_batches: int = 2,
        fidelity_min_cosine: float = 0.9999,
        calibration_cache: Path | None = None,
        timer: Callable[[], float] = time.perf_counter,
        backend: str = "auto",
        export_cache: Path | None = None,
    ) -> None:
        import torch

        self.resolved = model
        self.device = pick_device(device)
        self.dtype = pick_dtype(self.device, dtype)
        self.backend = pick_backend(self.device, backend)
        self.num_threads = num_threads or default_threads()
        self.prefetch_batches = max(1, prefetch_batches)
        if self.device == "cpu":
            torch.set_num_threads(self.num_threads)
        if quantize_int8 and self.backend != "torch":
            raise ValueError("int8 dynamic quantisation runs on backend torch")
        if self.dtype == "int8":  # explicit: OpenVINO's int8 model, calibrated before a run
            if not model.fixed_accuracy:
                raise ValueError(
                    "dtype int8 needs model.precision fixed_accuracy: its vectors fall below "
                    "the cosine faithful holds, so they must pass the evaluation gate"
                )
            if backend == "torch":
                raise ValueError("dtype int8 runs on backend openvino (NNCF's int8 model)")
            self.backend = pick_backend(self.device, "openvino")
        # explicit int8 takes its calibration sample from the first inputs it is given
        self._unpinned = self.dtype == "int8"
        # several candidate paths: calibrated on a sample of the first inputs this runner sees
        self._candidates = (
            []
            if quantize_int8
            else calibration_candidates(self.device, backend, dtype, int8=model.fixed_accuracy)
        )
        if self._candidates and (self.backend, self.dtype) not in self._candidates:
            self.backend, self.dtype = self._candidates[0]  # the first candidate is the default
        # the cosine a path must hold to torch fp32: the model's floor under fixed_accuracy
        self.fidelity_min_cosine = model.min_cosine if model.fixed_accuracy else fidelity_min_cosine
        self.calibration_cache = CalibrationCache(calibration_cache)
        # OpenVINO exports live beside the calibration cache (under the home) unless told
        shared = os.environ.get(EXPORT_CACHE_ENV)
        self.export_cache = export_cache or (
            Path(shared)
            if shared
            else calibration_cache.parent / "models" / "openvino"
            if calibration_cache
            else None
        )
        self._timer = timer
        self.calibration_seconds = 0.0  # spent deciding `auto`'s path, all runs together
        self._warm = False  # has the model been called once (calibration calls it too)?
        explicit = dtype != "auto" or backend != "auto"
        self.dtype_decision: DtypeDecision | None = (
            None
            if self._candidates
            else DtypeDecision(
                self.dtype,
                "set explicitly"
                if explicit
                else f"the default on {self.device}: no faster candidate to measure here",
                backend=self.backend,
            )
        )
        # On CPU, weights stay fp32 and a reduced dtype runs the matrix products under
        # autocast (layer norms and softmax stay fp32); on GPUs the weights are cast.
        self._autocast = self.device == "cpu" and self.dtype != "float32"
        self.model = self._load(model, quantize_int8)
        self.batch_features = BatchFeatures(self.model, model, self.device)
        self.dimension = int(self.model.get_embedding_dimension())
        self._openvino = OpenVinoBackend(
            self.model,
            model,
            self.batch_features.tokenize,
            self.token_ids,
            self.export_cache,
            self.num_threads,
        )
        if self.backend == "openvino" and not self._candidates:
            self._openvino_model()  # explicit: exported (or read back) with the model

    def _load(self, resolved: ResolvedModel, quantize_int8: bool):
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        try:
            with every_weight_loaded(resolved.path, "model"):
                model = SentenceTransformer(
                    str(resolved.path),
                    device=self.device,
                    local_files_only=True,
                    model_kwargs={
                        "dtype": torch.float32 if self._autocast else getattr(torch, self.dtype)
                    },
                )
        except Exception as error:  # noqa: BLE001
            raise ModelLoadError(
                f"cannot load model {resolved.name!r} from {resolved.path}: "
                f"{type(error).__name__}: {error}. Check model.name / model.path in the config."
            ) from error
        model.max_seq_length = resolved.max_seq_length
        model.eval()
        modules = list(model)
        has_normalize = type(modules[-1]).__name__ == "Normalize"
        if has_normalize and not resolved.normalize:
            del model[len(modules) - 1]
        self._normalize_here = resolved.normalize and not has_normalize
        if quantize_int8:
            if self.device != "cpu" or self.dtype != "float32":
                raise ValueError("int8 dynamic quantisation needs device cpu and dtype float32")
            model = torch.ao.quantization.quantize_dynamic(
                model, {torch.nn.Linear}, dtype=torch.qint8
            )
        return model

    # -------------------------------------------------------------- calibration

    @property
    def export_seconds(self) -> float:
        """Converting the model for OpenVINO, and quantizing it to int8 (0 when cached)."""
        return self._openvino.export_seconds + self._openvino.quantize_seconds

    def _openvino_model(self, dtype: str = "float32") -> None:
        """Make the OpenVINO path for `dtype` ready: the export read from the export cache,
        or made there now; for int8, its quantized model too. A fixed cost, once per machine
        (and calibration sample), counted with calibration, not the run's throughput."""
        before = self.export_seconds
        try:
            self._openvino.exported()
            if dtype == "int8":
                self._openvino.int8()
        except (OpenVinoMissingError, ExportError) as error:
            raise ModelLoadError(str(error)) from None
        self.calibration_seconds += self.export_seconds - before

    def _use(self, candidate: Candidate) -> None:
        import torch

        backend, dtype = candidate
        if backend == "openvino":
            self._openvino_model(dtype)
        elif self.device == "cpu":
            self._autocast = dtype != "float32"
        else:
            self.model.to(getattr(torch, dtype))
        self.backend, self.dtype = backend, dtype

    def device_name(self) -> str:
        import torch

        if self.device.startswith("cuda"):
            return torch.cuda.get_device_name(torch.device(self.device))
        return cpu_model_name()

    # ------------------------------------------------------------------ running

    def _warm_up(self, prepared: Prepared) -> float:
        """Call the model once on the first input, untimed by the run, so the first batch
        does not carry one-off costs (kernel selection, CUDA context, allocator growth);
        the seconds it took, 0 once warm."""
        if self._warm:
            return 0.0
        started = time.perf_counter()
        text = prepared.texts[:1]
        self._forward(text, self.batch_features.tokenize(text))
        self._warm = True
        return time.perf_counter() - started

    def _forward(self, texts: list[str], features: dict) -> np.ndarray:
        import torch

        if self.backend == "openvino":
            output = self._openvino.infer(features, self.dtype)
            if self._normalize_here:
                output /= np.maximum(np.linalg.norm(output, axis=1, keepdims=True), 1e-12)
            return output
        moved = {
            k: v.to(self.device, non_blocking=True) if hasattr(v, "to") else v
            for k, v in features.items()
        }
        autocast = torch.autocast("cpu", dtype=getattr(torch, self.dtype), enabled=self._autocast)
        with torch.inference_mode(), autocast:
            output = self.model(moved)["sentence_embedding"].float()
            if self._normalize_here:
                output = torch.nn.functional.normalize(output, p=2, dim=1)
            return output.cpu().numpy()

    def _run_batch(self, prepared: Prepared, stats: RunStats) -> list[tuple[int, np.ndarray]]:
        """Run one batch, splitting it on out-of-memory until single inputs fail on their own."""
        try:
            vectors = self._forward(prepared.texts, prepared.features)
            mask = prepared.features.get("attention_mask")
            if mask is not None:
                stats.tokens += int(mask.sum())
                stats.padded_tokens += int(mask.numel())
            stats.batches += 1
            return list(zip(prepared.positions, vectors, strict=True))
        except Exception as error:  # noqa: BLE001
            if not is_out_of_memory(error):
                raise
            self._free_cache()
            if len(prepared.texts) == 1:
                stats.failed[prepared.positions[0]] = f"out of memory even alone: {error}"
                return []
            stats.oom_splits += 1
            half = len(prepared.texts) // 2
            results = []
            for rows in (slice(0, half), slice(half, None)):
                results += self._run_batch(prepared.part(self.batch_features, rows), stats)
            return results

    def _capped(self, prepared: Prepared, limit: int | None) -> Iterator[Prepared]:
        """The batch itself, or slices of at most `limit` inputs after an out-of-memory."""
        if limit is None or len(prepared.texts) <= limit:
            yield prepared
            return
        for start in range(0, len(prepared.texts), limit):
            yield prepared.part(self.batch_features, slice(start, start + limit))

    def _free_cache(self) -> None:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    def run(
        self, batches: Iterable[PlannedBatch], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """Embed `(positions, texts)` or `(positions, texts, token_ids)` batches (see
        `PlannedBatch`); yields `(positions, vectors)` per batch.

        Positions of inputs that failed alone are left out of the yield and listed in
        `stats.failed`. After an out-of-memory split, later batches are cut to the size that
        worked (the budget is lowered for the rest of the run).
        """
        stats = stats if stats is not None else RunStats()
        limit: int | None = None
        started, calibrated_before = time.perf_counter(), self.calibration_seconds
        for prepared in self.batch_features.prefetched(
            self._calibrated(batches), self.prefetch_batches
        ):
            warming = self._warm_up(prepared)
            stats.warmup_seconds += warming
            started += warming
            stats.tokenized += len(prepared.texts) if prepared.tokenized else 0
            for part in self._capped(prepared, limit):
                splits_before = stats.oom_splits
                results = self._run_batch(part, stats)
                if stats.oom_splits > splits_before:  # lower the budget for the rest
                    limit = max(1, len(part.texts) // 2)
                stats.inputs += len(results)
                if results:
                    positions = [p for p, _ in results]
                    yield positions, np.stack([v for _, v in results])
        # what `auto` spent choosing a path is a fixed cost, not the model's throughput
        calibrating = self.calibration_seconds - calibrated_before
        stats.calibration_seconds += calibrating
        stats.seconds += time.perf_counter() - started - calibrating

    def embed(self, texts: list[str], token_budget: int = 4096, max_batch_size: int = 128):
        """Embed a list of texts in input order (plans its own batches). Returns (n, dim)."""
        from batch_pipeline.inference.batching import PlanSettings, pack_batches

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        token_ids = self.token_ids(texts)  # tokenised once: counted, planned, then padded
        counts = [len(ids) for ids in token_ids]
        if self.calibrating:  # timed on its median inputs; int8 pins a sample spread over all
            stride = max(1, len(texts) // CALIBRATION_INPUTS)
            head = texts[::stride][:CALIBRATION_INPUTS] if self.pins_int8_sample else None
            self.calibrate(head or median_sample(texts, counts))
        batches = pack_batches(counts, PlanSettings(token_budget, max_batch_size))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        stats = RunStats()
        planned = (
            (b.indices, [texts[i] for i in b.indices], [token_ids[i] for i in b.indices])
            for b in batches
        )
        for positions, vectors in self.run(planned, stats):
            out[positions] = vectors
        if stats.failed:
            raise RuntimeError(f"{len(stats.failed)} inputs could not be embedded")
        return out

    @cached_property
    def _token_ids(self) -> TokenIds:
        return TokenIds(self.model.tokenizer, self.resolved.max_seq_length, self.num_threads)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids as the model reads them: special tokens included, cut to its
        sequence limit as its tokenizer cuts (what `run` pads when a batch carries them);
        counted on every thread the runner may use."""
        return self._token_ids(texts)

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.token_ids(texts)]

    def cuda_free_bytes(self) -> int | None:
        import torch

        if not self.device.startswith("cuda"):
            return None
        free, _total = torch.cuda.mem_get_info(torch.device(self.device))
        return int(free)


class LoadedModels:
    """One loaded runner per model, for a process: a run that embeds, then scores its
    generation, loads the model once. Call it with a model; `settings` go to the runner."""

    def __init__(self, **settings: object) -> None:
        self.settings = settings
        self._runners: dict[tuple[str, str], EmbeddingRunner] = {}

    def __call__(self, model: ResolvedModel) -> EmbeddingRunner:
        key = (str(model.path), repr(model.identity()))
        if key not in self._runners:
            self._runners[key] = EmbeddingRunner(model, **self.settings)
        return self._runners[key]
