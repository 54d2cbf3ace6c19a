"""The embedding executor: token-budget batches of stale inputs, run through an `Embedder`
(the vector index's chunks, the ticket intents' tickets)."""

from collections.abc import Callable
from dataclasses import dataclass

from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.execute import ExecuteSummary, execute_plan
from batch_pipeline.stages.plan import PlanSummary, plan_stale_chunks
from batch_pipeline.state.staging import StagePath


@dataclass(frozen=True)
class EmbeddingExecutor:
    """Embeds with `model` (see `batch_pipeline.stages.plan` and `.execute`)."""

    model: ResolvedModel

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
            load,
            self.model.embedding_dimension,
            checkpoints,
            options.checkpoint_every,
            progress,
            progress_interval,
        )
