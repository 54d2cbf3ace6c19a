"""The generation executor: a chat model's prompt plan (what fits the engine, in chunks its
KV cache holds), run through a `Generator` with one sampling and output schema (the document
briefs). The embedders' plan settings do not apply: the prompt plan's come from the engine."""

from collections.abc import Callable
from dataclasses import dataclass

from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.generate import GenerateSummary, execute_prompts
from batch_pipeline.stages.prompt_plan import PromptPlanSettings, PromptPlanSummary, plan_prompts
from batch_pipeline.state.staging import StagePath


@dataclass(frozen=True)
class GenerationExecutor:
    """Generates with `generator` under `sampling`, held to `schema` (None: free text)."""

    generator: Generator
    sampling: Sampling
    schema: dict | None
    settings: PromptPlanSettings

    def plan(
        self, prepared: StagePath, out: StagePath, options: ExecuteOptions
    ) -> PromptPlanSummary:
        return plan_prompts(prepared, out, self.generator, self.sampling, self.settings)

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], Generator],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> GenerateSummary:
        return execute_prompts(
            planned,
            out,
            load,
            self.sampling,
            self.schema,
            checkpoints,
            progress,
            progress_interval,
        )


DEFAULT_EXECUTOR = "vllm"  # the registry's first generate executor
RUN_BATCH = "vllm-run-batch"


def parallel_problem(
    executor: str, model: ChatModel, tensor_parallel_size: int, data_parallel_size: int
) -> tuple[str, str] | None:
    """The setting that cannot run, and why, for the generation resource and `run` alike:
    data parallelism is engines in processes of their own (`vllm-run-batch` only), and
    tensor parallelism must split the model's attention heads evenly. None if both can."""
    if data_parallel_size > 1 and executor != RUN_BATCH:
        return (
            "data_parallel_size",
            f"above 1 needs executor {RUN_BATCH} (vLLM's offline engine in the run's process "
            "is one engine); or shard the collection and give each shard's run its own GPU",
        )
    if tensor_parallel_size > 1 and executor not in (DEFAULT_EXECUTOR, RUN_BATCH):
        return ("tensor_parallel_size", f"splits a vLLM engine: executor {executor} runs none")
    why = model.tensor_parallel_problem(tensor_parallel_size)
    return ("tensor_parallel_size", why) if why is not None else None
