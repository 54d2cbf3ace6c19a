"""The inference resource: runs planned batches on the best device present."""

from pathlib import Path

import dagster as dg
from pydantic import Field, PrivateAttr

from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.executors.registry import EMBED
from batch_pipeline.inference.batching import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_TOKEN_BUDGET,
    PlanSettings,
    budget_from_memory,
)
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.devices import dtype_bytes, pick_backend, pick_device, pick_dtype
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.inference.runner import EmbeddingRunner, LoadedModels
from batch_pipeline.state.storage import resolve_storage
from resources.batch_api import BatchApiResource


class InferenceResource(BatchApiResource):
    """Loads the embedding model once per run and embeds batches.

    `device: auto` tries CUDA, then MPS, then CPU. `dtype: auto` with `backend: auto` starts
    from torch fp32 on CPU and torch bf16 (or fp16) on a GPU, then measures the other paths on
    a sample of the run's median-length inputs (on CPU: torch bf16 where the CPU has bf16
    instructions, OpenVINO fp32 and bf16 where openvino is installed; fp16 on CUDA) and keeps
    one only if it is clearly faster and at least `fidelity_min_cosine` faithful to torch
    fp32. The measurements and the OpenVINO export are cached in the state folder. An explicit
    dtype or backend narrows the choice. On CUDA the padded-token budget comes from free
    device memory.
    """

    executor: str = Field(
        default="local",
        description="What embeds the plan: local (this process: torch or OpenVINO, as "
        "measured), vllm (vLLM's engine in this process), vllm-run-batch (vLLM's own "
        "run-batch over the plan's OpenAI batch files, in a subprocess) or openai-batch (the "
        "same files through an OpenAI-compatible Batch API at api_base).",
    )
    device: str = Field(default="auto", description="auto, cuda, cuda:N, mps or cpu.")
    dtype: str = Field(
        default="auto",
        description="auto, float32, float16, bfloat16, or int8 (CPU: OpenVINO's int8 model, "
        "for collections whose model.precision is fixed_accuracy).",
    )
    backend: str = Field(
        default="auto",
        description="What runs the model: auto (measured), torch, or openvino (CPU only).",
    )
    token_budget: int = Field(
        default=DEFAULT_TOKEN_BUDGET,
        ge=1,
        description="Most padded tokens per batch on CPU/MPS (CUDA derives its own).",
    )
    max_batch_size: int = Field(
        default=DEFAULT_MAX_BATCH_SIZE, ge=1, description="Most inputs in one batch."
    )
    cuda_memory_fraction: float = Field(
        default=0.5, gt=0, le=1, description="Share of free CUDA memory one batch may use."
    )
    num_threads: int | None = Field(
        default=None, ge=1, description="CPU intra-op threads; default one per available core."
    )
    quantize_int8: bool = Field(
        default=False,
        description="Opt-in dynamic int8 quantisation on CPU: faster, but lowers fidelity.",
    )
    prefetch_batches: int = Field(
        default=2, ge=1, description="Batches tokenised ahead of the forward pass."
    )
    fidelity_min_cosine: float = Field(
        default=0.9999,
        ge=0,
        le=1,
        description="dtype auto keeps a reduced dtype only if its vectors' minimum cosine to "
        "fp32 on the calibration sample is at least this.",
    )
    calibration_cache: str | None = Field(
        default=None,
        description="JSON file of dtype and backend measurements per machine, versions and "
        "model; default <home>/calibration.json (OpenVINO exports go beside it, in "
        "models/openvino).",
    )

    _runners: LoadedModels = PrivateAttr()

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.check_executor(EMBED)
        self._runners = LoadedModels(
            device=self.device,
            dtype=self.dtype,
            backend=self.backend,
            num_threads=self.num_threads,
            quantize_int8=self.quantize_int8,
            prefetch_batches=self.prefetch_batches,
            fidelity_min_cosine=self.fidelity_min_cosine,
            calibration_cache=Path(
                self.calibration_cache or resolve_storage().home / CALIBRATION_FILE
            ),
        )
        try:
            pick_backend(self.resolved_device(), self.backend)
            pick_dtype("cpu", self.dtype)
        except ValueError as error:
            raise ValueError(f"InferenceResource: {error}") from None

    def resolved_device(self) -> str:
        return pick_device(self.device)

    def runner(self, model: ResolvedModel) -> EmbeddingRunner:
        """The loaded model (once per process and model)."""
        return self._runners(model)

    def execute_options(self, model: ResolvedModel) -> ExecuteOptions:
        """The plan's batch budget for this device, and the bytes per activation value."""
        device = self.resolved_device()
        width = dtype_bytes(pick_dtype(device, self.dtype))
        budget = self.token_budget
        if device.startswith("cuda"):
            import torch

            free, _total = torch.cuda.mem_get_info(torch.device(device))
            budget = budget_from_memory(free, model, width, self.cuda_memory_fraction)
        plan = PlanSettings(token_budget=budget, max_batch_size=self.max_batch_size)
        return ExecuteOptions(plan, dtype_bytes=width)
