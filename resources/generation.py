"""The generation resource: runs prompt plans through a chat model on vLLM, or hands them to
an OpenAI-compatible Batch API."""

from pathlib import Path

import dagster as dg
from pydantic import Field, PrivateAttr

from batch_pipeline.executors.generation import parallel_problem
from batch_pipeline.executors.registry import GENERATE, default_executor
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.chat_models import ChatModel, resolve_chat_model
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.inference.vllm_generator import (
    GENERATION_DTYPES,
    EngineSettings,
    VllmGenerator,
    engine_settings_for,
    generation_device,
)
from batch_pipeline.stages.prompt_plan import PromptPlanSettings, plan_settings_for
from batch_pipeline.state.storage import resolve_storage
from resources.batch_api import BatchApiResource


class GenerationResource(BatchApiResource):
    """Loads a chat model into vLLM once per run and generates from prompt plans.

    vLLM batches continuously over a paged KV cache, computes a shared prompt prefix once and
    prefills in chunks; this resource sizes it. With no `model_path` it serves the shipped
    SmolLM2-135M-Instruct, converted once under the home from its GGUF file.
    """

    model_path: str | None = Field(
        default=None,
        description="A Hugging Face causal LM folder; default the shipped SmolLM2-135M-Instruct, "
        "converted under <home>/models.",
    )
    device: str = Field(default="auto", description="auto (cuda where present), cpu or cuda.")
    dtype: str = Field(
        default="auto",
        description="auto, bfloat16, float16 or float32. auto is bf16 on a GPU, and on a CPU "
        "bf16 only where it measures faster than fp32.",
    )
    kv_cache_gib: int = Field(
        default=1,
        ge=1,
        description="KV cache size on CPU, in whole GiB of host memory (VLLM_CPU_KVCACHE_SPACE "
        "takes whole GiB, so a fraction is refused rather than rounded).",
    )
    gpu_memory_utilization: float = Field(
        default=0.85,
        gt=0,
        le=1,
        description="Share of the GPU's memory vLLM may take for weights and KV cache (CUDA).",
    )
    max_num_seqs: int = Field(
        default=32, ge=1, description="Most sequences the engine decodes at once."
    )
    max_model_len: int = Field(
        default=2048,
        ge=16,
        description="Most tokens of prompt plus output per sequence; longer prompts are "
        "refused by the plan.",
    )
    enforce_eager: bool = Field(
        default=True,
        description="Run eagerly, without CUDA graphs or compilation: starts faster; set false "
        "on a GPU for long runs.",
    )
    enable_prefix_caching: bool = Field(
        default=True, description="Compute a shared prompt prefix (the system part) once."
    )
    greedy: bool = Field(
        default=True,
        description="Greedy decoding, so a rerun gives the same output; false samples at "
        "`temperature`.",
    )
    temperature: float = Field(
        default=0.7, ge=0, description="Sampling temperature when `greedy` is false."
    )
    seed: int = Field(default=0, description="Sampling seed when `greedy` is false.")
    max_tokens: int = Field(default=256, ge=1, description="Most output tokens per prompt.")
    chunk_size: int = Field(
        default=256,
        ge=1,
        description="Finished outputs per checkpoint (or 10 s, whichever first), and how many "
        "prompts execute keeps handed to the engine ahead: a crash regenerates at most that.",
    )
    pool: str = Field(
        default="gpu",
        description="The Dagster pool the generating step runs in (deploy/dagster.yaml).",
    )
    calibration_cache: str | None = Field(
        default=None,
        description="JSON file of dtype measurements; default <home>/calibration.json.",
    )
    executor: str = Field(
        default=default_executor(GENERATE),
        description="What runs the plan: vllm (in the run's process), vllm-run-batch (vLLM's "
        "own run-batch over the plan's OpenAI batch files, in a subprocess) or openai-batch "
        "(the same files through an OpenAI-compatible Batch API at api_base).",
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="GPUs one engine's layers are split over (a model too big for one GPU).",
    )
    data_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Engines, one per GPU (or tensor-parallel group) on the node, each taking "
        "a share of the requests: the vllm-run-batch executor only (vLLM's offline engine in "
        "the run's process is one engine).",
    )
    _generator: VllmGenerator | None = PrivateAttr(default=None)
    _model: ChatModel | None = PrivateAttr(default=None)
    _engine: EngineSettings | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        if self.dtype not in GENERATION_DTYPES:
            raise ValueError(
                f"GenerationResource.dtype must be one of {', '.join(GENERATION_DTYPES)}, "
                f"got {self.dtype!r}"
            )
        try:
            generation_device(self.device)
        except ValueError as error:
            raise ValueError(f"GenerationResource.device: {error}") from None
        self.check_executor(GENERATE)  # its name, its settings and its Batch API's
        if self.tensor_parallel_size > 1 or self.data_parallel_size > 1:
            problem = parallel_problem(
                self.executor,
                self.chat_model(),
                self.tensor_parallel_size,
                self.data_parallel_size,
            )
            if problem is not None:
                raise ValueError(f"GenerationResource.{problem[0]}: {problem[1]}")

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._generator is not None:
            self._generator.close()

    @property
    def sampling(self) -> Sampling:
        return Sampling(
            max_tokens=self.max_tokens,
            temperature=0.0 if self.greedy else self.temperature,
            seed=self.seed,
        )

    def chat_model(self) -> ChatModel:
        """The model's folder and shape (converting the shipped one the first time)."""
        if self._model is None:
            self._model = resolve_chat_model(self.model_path, resolve_storage().home)
        return self._model

    def engine_settings(self) -> EngineSettings:
        """The engine's settings, the device and `dtype: auto` decided once per run."""
        if self._engine is not None:
            return self._engine
        cache = Path(self.calibration_cache or resolve_storage().home / CALIBRATION_FILE)
        self._engine = engine_settings_for(
            self.chat_model(),
            self.device,
            self.dtype,
            cache,
            kv_cache_gib=self.kv_cache_gib,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            enforce_eager=self.enforce_eager,
            enable_prefix_caching=self.enable_prefix_caching,
            tensor_parallel_size=self.tensor_parallel_size,
            data_parallel_size=self.data_parallel_size,
        )
        return self._engine

    def generator(self) -> Generator:
        """The generator (once per run): cheap to get, the engine starts on first use."""
        if self._generator is None:
            self._generator = VllmGenerator(self.chat_model(), self.engine_settings())
        return self._generator

    def plan_settings(self) -> PromptPlanSettings:
        return plan_settings_for(self.engine_settings(), self.chunk_size)
