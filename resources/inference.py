"""The inference resource: runs planned batches on the best device present."""

from pathlib import Path

import dagster as dg
from pydantic import Field, PrivateAttr

from batch_pipeline.inference.batching import PlanSettings, budget_from_memory
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.inference.runner import (
    EmbeddingRunner,
    LoadedModels,
    dtype_bytes,
    pick_device,
    pick_dtype,
)
from batch_pipeline.state.storage import resolve_storage


class InferenceResource(dg.ConfigurableResource):
    """Loads the embedding model once per run and embeds batches.

    `device: auto` tries CUDA, then MPS, then CPU. `dtype: auto` starts from fp32 on CPU and
    bf16 (or fp16) on a GPU, then measures the faster candidates on the run's first inputs
    (bf16 on a CPU with bf16 instructions; fp16 on CUDA) and keeps one only if it is clearly
    faster and at least `fidelity_min_cosine` faithful to fp32; the measurements are cached
    in the state folder. On CUDA the padded-token budget comes from free device memory.
    """

    device: str = Field(default="auto", description="auto, cuda, cuda:N, mps or cpu.")
    dtype: str = Field(default="auto", description="auto, float32, float16 or bfloat16.")
    token_budget: int = Field(
        default=4096, description="Most padded tokens per batch on CPU/MPS (CUDA derives its own)."
    )
    max_batch_size: int = Field(default=128, description="Most inputs in one batch.")
    cuda_memory_fraction: float = Field(
        default=0.5, description="Share of free CUDA memory one batch may use."
    )
    num_threads: int | None = Field(
        default=None, description="CPU intra-op threads; default one per available core."
    )
    quantize_int8: bool = Field(
        default=False,
        description="Opt-in dynamic int8 quantisation on CPU: faster, but lowers fidelity.",
    )
    prefetch_batches: int = Field(
        default=2, description="Batches tokenised ahead of the forward pass."
    )
    fidelity_min_cosine: float = Field(
        default=0.9999,
        description="dtype auto keeps a reduced dtype only if its vectors' minimum cosine to "
        "fp32 on the calibration sample is at least this.",
    )
    calibration_cache: str | None = Field(
        default=None,
        description="JSON file of dtype measurements per machine, torch and model; default "
        "<home>/calibration.json.",
    )

    _runners: LoadedModels = PrivateAttr()

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._runners = LoadedModels(
            device=self.device,
            dtype=self.dtype,
            num_threads=self.num_threads,
            quantize_int8=self.quantize_int8,
            prefetch_batches=self.prefetch_batches,
            fidelity_min_cosine=self.fidelity_min_cosine,
            calibration_cache=Path(
                self.calibration_cache or resolve_storage().home / CALIBRATION_FILE
            ),
        )
        if self.token_budget < 1 or self.max_batch_size < 1:
            raise ValueError("InferenceResource.token_budget and max_batch_size must be positive")
        try:
            self.resolved_device()
            pick_dtype("cpu", self.dtype)
        except ValueError as error:
            raise ValueError(f"InferenceResource: {error}") from None

    def resolved_device(self) -> str:
        return pick_device(self.device)

    def runner(self, model: ResolvedModel) -> EmbeddingRunner:
        """The loaded model (once per process and model)."""
        return self._runners(model)

    def plan_settings(self, model: ResolvedModel) -> tuple[PlanSettings, int]:
        """Batch budget for this device, and the bytes per activation value."""
        device = self.resolved_device()
        width = dtype_bytes(pick_dtype(device, self.dtype))
        budget = self.token_budget
        if device.startswith("cuda"):
            import torch

            free, _total = torch.cuda.mem_get_info(torch.device(device))
            budget = budget_from_memory(free, model, width, self.cuda_memory_fraction)
        return PlanSettings(token_budget=budget, max_batch_size=self.max_batch_size), width
