"""The `local` embedding executor, and what every embedding executor shares: token-budget
batches of stale inputs (the vector index's chunks, the ticket intents' tickets), run through
an `Embedder`. The executors differ only in that engine: `local` runs the product's own
(torch, OpenVINO, int8: `inference.runner`), `vllm` and `vllm-run-batch` run vLLM's
(`executors.vllm_embedding`)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from batch_pipeline.executors import Capabilities, ChosenSettings, ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.registry import EMBED, executor_class
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.execute import ExecuteSummary, execute_plan
from batch_pipeline.stages.plan import PlanSummary, plan_stale_chunks
from batch_pipeline.state.staging import StagePath


@dataclass(frozen=True)
class EmbeddingExecutor(ChosenSettings):
    """Embeds with `model` (see `batch_pipeline.stages.plan` and `.execute`) on the engine
    the run loads: the inference settings' device and dtype are that engine's."""

    capabilities: ClassVar[Capabilities] = Capabilities()  # the engine the run loads
    model: ResolvedModel
    device: str = "auto"  # the inference settings (`--device`, the inference resource's)
    dtype: str = "auto"
    # how the caller spells a setting in an error (`--dtype`, `InferenceResource.dtype`)
    spelled: Callable[[str], str] = field(default=lambda setting: setting, compare=False)

    @classmethod
    def chosen(cls, model: ResolvedModel, choice: ExecutorChoice) -> "EmbeddingExecutor":
        """The executor `choice` configures, for `model` (a ConfigError, naming the setting
        as the caller spells it, for settings it cannot run)."""
        return cls(model, choice.device, choice.dtype, choice.spelled)

    @property
    def served_model(self) -> str | None:
        """Another model than the configured one that this executor embeds with (a
        provider's), whose vectors are another generation's; None: the configured one."""
        return None

    def engine(self, load: Callable[[], Embedder]) -> Callable[[], Embedder]:
        """What execute embeds with: the run's own engine (`load`), for `local`."""
        return load

    def plan(self, prepared: StagePath, out: StagePath, options: ExecuteOptions) -> PlanSummary:
        return plan_stale_chunks(prepared, out, options.plan, self.model, options.dtype_bytes)

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], Embedder],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> ExecuteSummary:
        return execute_plan(
            planned,
            out,
            self.engine(load),
            self.model.embedding_dimension,
            checkpoints,
            options.checkpoint_every,
            progress,
            progress_interval,
        )


def embedding_executor(model: ResolvedModel, choice: ExecutorChoice | None) -> EmbeddingExecutor:
    """The embedding executor `choice` names (`local` when it names none), for `model`."""
    choice = choice or ExecutorChoice()
    return executor_class(EMBED, choice.name).chosen(model, choice)
