"""The inference resource: runs planned batches on the best device present."""

import dagster as dg
from pydantic import Field, PrivateAttr

from batch_pipeline.inference.batching import PlanSettings, budget_from_memory
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.inference.runner import (
    EmbeddingRunner,
    dtype_bytes,
    pick_device,
    pick_dtype,
)


class InferenceResource(dg.ConfigurableResource):
    """Loads the embedding model once per run and embeds batches.

    `device: auto` tries CUDA, then MPS, then CPU; `dtype: auto` is bf16 (or fp16) on a GPU
    and fp32 on CPU. On CUDA the padded-token budget comes from free device memory.
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

    _runners: dict = PrivateAttr(default_factory=dict)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._runners = {}
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
        key = (model.path, model.identity().__repr__())
        if key not in self._runners:
            self._runners[key] = EmbeddingRunner(
                model,
                device=self.device,
                dtype=self.dtype,
                num_threads=self.num_threads,
                quantize_int8=self.quantize_int8,
                prefetch_batches=self.prefetch_batches,
            )
        return self._runners[key]

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
