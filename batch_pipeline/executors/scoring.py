"""The score family's executors: (query, document) pairs planned under a token budget and
scored by a reranker (`stages.score`), differing only in the engine that scores a batch:
`local` runs the cross-encoder in the run's process (sentence-transformers), `vllm` on vLLM's
engine in that process (`LLM.score`). Both give the same scores within float rounding, so a
product's generation does not depend on which ran it."""

from collections.abc import Callable
from dataclasses import dataclass, field

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.registry import SCORE, executor_class
from batch_pipeline.inference.rerankers import ResolvedReranker
from batch_pipeline.inference.scorer import CrossEncoderScorer, Scorer
from batch_pipeline.inference.vllm_embedder import settings_problem
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.score import ScorePlanSummary, ScoreSummary, execute_pairs, plan_pairs
from batch_pipeline.state.staging import StagePath


@dataclass(frozen=True)
class ScoreExecutor:
    """Scores with `reranker` in the run's process (`local`)."""

    reranker: ResolvedReranker
    device: str = "auto"
    dtype: str = "auto"
    spelled: Callable[[str], str] = field(default=lambda setting: setting, compare=False)

    def __post_init__(self) -> None:
        problem = self.settings_problem(self.device, self.dtype)
        if problem is not None:
            raise ConfigError(f"{self.spelled(problem[0])}: {problem[1]}")

    @staticmethod
    def settings_problem(device: str, dtype: str) -> tuple[str, str] | None:
        if dtype not in ("auto", "float32"):
            return "dtype", f"{dtype!r}: the in-process reranker scores in float32 (auto)"
        return None

    def scorer(self, options: ExecuteOptions) -> Scorer:
        """The engine a batch is scored on."""
        device = "cpu" if self.device == "auto" else self.device
        return CrossEncoderScorer(self.reranker, device, options.plan)

    def plan(
        self, prepared: StagePath, out: StagePath, options: ExecuteOptions
    ) -> ScorePlanSummary:
        counter = CrossEncoderScorer(self.reranker, "cpu", options.plan)  # its tokenizer only
        return plan_pairs(prepared, out, counter.token_counts, options.plan)

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], Scorer],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> ScoreSummary:
        """Score the plan; the engine is this executor's (`load` is not used)."""
        return execute_pairs(
            planned,
            out,
            lambda: self.scorer(options),
            checkpoints,
            options.checkpoint_every,
            progress,
            progress_interval,
        )


@dataclass(frozen=True)
class VllmScoreExecutor(ScoreExecutor):
    """Scores with `reranker` on vLLM's engine in the run's process (`vllm`)."""

    settings_problem = staticmethod(settings_problem)

    def scorer(self, options: ExecuteOptions) -> Scorer:
        from batch_pipeline.inference.vllm_embedder import embed_engine_settings
        from batch_pipeline.inference.vllm_scorer import VllmScorer

        return VllmScorer(
            self.reranker, embed_engine_settings(self.device, self.dtype), options.plan
        )


def score_executor(reranker: ResolvedReranker, choice: ExecutorChoice | None) -> ScoreExecutor:
    """The score executor `choice` names (`local` when it names none), for `reranker`."""
    choice = choice or ExecutorChoice()
    chosen = executor_class(SCORE, choice.name)
    return chosen(reranker, choice.device, choice.dtype, choice.spelled)
