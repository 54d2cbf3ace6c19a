"""The generation executor: a chat model's prompt plan (what fits the engine, in chunks its
KV cache holds), run through a `Generator` with one sampling and output schema (the document
briefs). The embedders' plan settings do not apply: the prompt plan's come from the engine."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import Capabilities, ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.registry import (
    GENERATE,
    capabilities,
    executor_class,
    executors_with,
)
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.generate import GenerateSummary, execute_prompts
from batch_pipeline.stages.prompt_plan import PromptPlanSettings, PromptPlanSummary, plan_prompts
from batch_pipeline.state.staging import StagePath


@dataclass(frozen=True)
class GenerationExecutor:
    """Generates with `generator` under `sampling`, held to `schema` (None: free text)."""

    # the engine the run loads: vLLM's in this process, which tensor parallelism splits
    capabilities: ClassVar[Capabilities] = Capabilities(tensor_parallel=True)
    generator: Generator
    sampling: Sampling
    schema: dict | None
    settings: PromptPlanSettings

    @classmethod
    def chosen(
        cls,
        generator: Generator,
        sampling: Sampling,
        schema: dict | None,
        settings: PromptPlanSettings,
        choice: ExecutorChoice,
    ) -> "GenerationExecutor":
        """This executor for `generator` under `sampling` and `schema`, as `choice`
        configures it: a ConfigError, naming the setting as the caller spells it, for what
        it cannot run (before any stage runs)."""
        if cls.capabilities.own_engine and not hasattr(generator, "settings"):
            raise ConfigError(
                f"{choice.spelled('executor')} {choice.name}: runs vLLM's own engine from the "
                "chat model's engine settings; it needs the vLLM generator, not a test's "
                "stand-in"
            )
        return cls(generator, sampling, schema, settings)

    @staticmethod
    def settings_problem(device: str, dtype: str) -> tuple[str, str] | None:
        """The device or dtype this executor cannot run, and why: the engine's own settings
        check them (`GenerationResource`), so None."""
        return None

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


def generation_executor(
    choice: ExecutorChoice,
    generator: Generator,
    sampling: Sampling,
    schema: dict | None,
    settings: PromptPlanSettings,
) -> GenerationExecutor:
    """The generate executor `choice` names (the family's default when it names none), for
    `generator` under `sampling` and `schema`: what the briefs and the ticket cascade run."""
    return executor_class(GENERATE, choice.name).chosen(
        generator, sampling, schema, settings, choice
    )


def parallel_problem(
    executor: str, model: ChatModel, tensor_parallel_size: int, data_parallel_size: int
) -> tuple[str, str] | None:
    """The setting that cannot run, and why, for the generation resource and `run` alike:
    data parallelism is engines side by side (an executor that declares `data_parallel`),
    and tensor parallelism splits an engine (`tensor_parallel`) evenly over the model's
    attention heads. None if both can."""
    able = capabilities(GENERATE, executor)
    if data_parallel_size > 1 and not able.data_parallel:
        return (
            "data_parallel_size",
            f"above 1 needs executor {' or '.join(executors_with('data_parallel', GENERATE))} "
            "(vLLM's offline engine in the run's process is one engine); or shard the "
            "collection and give each shard's run its own GPU",
        )
    if tensor_parallel_size > 1 and not able.tensor_parallel:
        return ("tensor_parallel_size", f"splits a vLLM engine: executor {executor} runs none")
    why = model.tensor_parallel_problem(tensor_parallel_size)
    return ("tensor_parallel_size", why) if why is not None else None
