"""The score family's executors: (query, document) pairs planned under a token budget and
scored by a reranker (`stages.score`), differing only in the engine that scores a batch:
`local` runs the cross-encoder in the run's process (sentence-transformers), `vllm` on vLLM's
engine in that process (`LLM.score`), `vllm-run-batch` through vLLM's own `run-batch` in a
subprocess, over the plan written as `/score` lines of an OpenAI batch file (a line per query
of a planned batch, up to 50,000 pairs a file; each file pays the engine's start). All give
the same scores within float rounding, so a product's generation does not depend on which
ran it.

The reranker may also be a chat model as the yes/no judge (`inference.judge.ResolvedJudge`):
`local` and `vllm` then run it on vLLM in the run's process (`VllmJudge`), `vllm-run-batch`
through vLLM's `run-batch` (`RunBatchJudge`: chat completion lines with log-probabilities),
and `openai-batch` (`executors.openai_batch_score`) on a provider's Batch API, with the same
prompts and the same score from the first token's log-probabilities."""

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import ClassVar

import numpy as np

from batch_pipeline.config import JUDGE, RerankerConfig
from batch_pipeline.executors import Capabilities, ChosenSettings, ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.batch_file import (
    MAX_REQUESTS,
    BatchResult,
    judge_request_line,
    read_results,
    score_request_line,
    write_batch_files,
)
from batch_pipeline.executors.registry import SCORE, executor_class
from batch_pipeline.executors.run_batch import (
    RunBatchError,
    run_batch_command,
    run_batch_environment,
    run_batch_file,
)
from batch_pipeline.executors.vllm_embedding import pooling_command
from batch_pipeline.inference.chat_models import resolve_chat_model
from batch_pipeline.inference.cross_encoder import CrossEncoderScorer
from batch_pipeline.inference.devices import pick_device
from batch_pipeline.inference.judge import ResolvedJudge, judge_prompts
from batch_pipeline.inference.rerankers import ResolvedReranker, resolve_reranker
from batch_pipeline.inference.scorer import BatchedScorer, Pair, Scorer
from batch_pipeline.inference.vllm_embedder import (
    EmbedEngineSettings,
    embed_engine_settings,
    settings_problem,
)
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.score import ScorePlanSummary, ScoreSummary, execute_pairs, plan_pairs
from batch_pipeline.state.staging import StagePath

Reranker = ResolvedReranker | ResolvedJudge  # a cross-encoder, or a chat model as the judge


def configured_reranker(config: RerankerConfig, home: Path) -> Reranker:
    """The reranker `collections[].reranker` configures: its cross-encoder folder, or the
    chat model as the yes/no judge (the shipped one unless `chat_model` names a folder,
    converted under `home` when first used)."""
    if config.model == JUDGE:
        return ResolvedJudge(resolve_chat_model(config.chat_model, home))
    return resolve_reranker(config.model)


def judge_tokenizer(judge: ResolvedJudge):  # noqa: ANN201 - a VllmGenerator, never started
    """The judge's chat model for its tokenizer only: the document cut and the counts."""
    from batch_pipeline.inference.vllm_generator import EngineSettings, VllmGenerator

    return VllmGenerator(judge.model, EngineSettings())


def pair_token_counts(reranker: Reranker) -> Callable[[list[Pair]], list[int]]:
    """How the plan counts a pair: as the cross-encoder encodes it, or as the judge's prompt
    (the document cut as the judge cuts it) in the chat model's template."""
    if isinstance(reranker, ResolvedJudge):
        generator = judge_tokenizer(reranker)
        return lambda pairs: generator.token_counts(
            judge_prompts(generator, pairs, reranker.document_tokens)
        )
    return CrossEncoderScorer(reranker, "cpu").token_counts  # its tokenizer only


@dataclass(frozen=True)
class ScoreExecutor(ChosenSettings):
    """Scores with `reranker` in the run's process (`local`): a cross-encoder on
    sentence-transformers, the judge on vLLM."""

    capabilities: ClassVar[Capabilities] = Capabilities()  # in this process
    reranker: Reranker
    device: str = "auto"
    dtype: str = "auto"
    spelled: Callable[[str], str] = field(default=lambda setting: setting, compare=False)

    @classmethod
    def chosen(cls, reranker: Reranker, choice: ExecutorChoice) -> "ScoreExecutor":
        """This executor for `reranker`, on the settings the caller chose."""
        return cls(reranker, choice.device, choice.dtype, choice.spelled)

    @staticmethod
    def settings_problem(device: str, dtype: str) -> tuple[str, str] | None:
        if dtype not in ("auto", "float32"):
            return "dtype", f"{dtype!r}: the in-process reranker scores in float32 (auto)"
        return None

    def scorer(self, options: ExecuteOptions) -> Scorer:
        """The engine a batch is scored on (`auto`: the device every engine picks)."""
        if isinstance(self.reranker, ResolvedJudge):
            return self.judge()
        return CrossEncoderScorer(self.reranker, pick_device(self.device), options.plan)

    def judge_generator(self):  # noqa: ANN201 - a VllmGenerator, started on first use
        """The judge's chat model on this executor's device and dtype."""
        from batch_pipeline.inference.vllm_generator import VllmGenerator, engine_settings_for

        model = self.reranker.model
        return VllmGenerator(model, engine_settings_for(model, self.device, self.dtype))

    def judge(self) -> Scorer:
        """The judge on vLLM in the run's process."""
        from batch_pipeline.inference.judge import VllmJudge

        return VllmJudge(self.judge_generator(), self.reranker.document_tokens)

    def plan(
        self, prepared: StagePath, out: StagePath, options: ExecuteOptions
    ) -> ScorePlanSummary:
        return plan_pairs(prepared, out, pair_token_counts(self.reranker), options.plan)

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

    capabilities: ClassVar[Capabilities] = Capabilities(own_engine=True)  # vLLM's

    settings_problem = staticmethod(settings_problem)

    def scorer(self, options: ExecuteOptions) -> Scorer:
        if isinstance(self.reranker, ResolvedJudge):
            return self.judge()
        from batch_pipeline.inference.vllm_scorer import VllmScorer

        return VllmScorer(
            self.reranker, embed_engine_settings(self.device, self.dtype), options.plan
        )


class RunBatchScorer(BatchedScorer):
    """A scorer whose engine is `vllm run-batch`: the planned batches, up to `max_pairs`
    pairs at a time, as one batch file of `/score` lines each (see the module docstring)."""

    backend = "vllm-run-batch"
    max_pairs = MAX_REQUESTS

    def __init__(self, reranker: ResolvedReranker, settings: EmbedEngineSettings) -> None:
        super().__init__(reranker)
        self.engine_settings = settings
        self.device = settings.device

    def score_batch(self, pairs: list[Pair]) -> np.ndarray:
        return next(self.run([pairs]))

    def run(self, batches: Iterable[list[Pair]]) -> Iterator[np.ndarray]:
        group: list[list[Pair]] = []
        for pairs in batches:
            if group and sum(map(len, group)) + len(pairs) > self.max_pairs:
                yield from self._run_group(group)
                group = []
            group.append(pairs)
        if group:
            yield from self._run_group(group)

    def _lines(self, group: list[list[Pair]]) -> Iterator[dict]:
        """A line per query of each batch, its id `<batch>:<first pair>`; each document cut
        to what the pair's length leaves it (the query, `[CLS]` and two `[SEP]` first)."""
        tokenizer = self.tokenizer()
        for number, pairs in enumerate(group):
            start = 0
            for query, run in groupby(pairs, key=lambda pair: pair[0]):
                documents = [document for _, document in run]
                query_tokens = len(tokenizer(query, add_special_tokens=False)["input_ids"])
                room = max(1, self.reranker.max_length - query_tokens - 3)
                yield score_request_line(
                    f"{number}:{start}", query, documents, self.reranker.name, room
                )
                start += len(documents)

    def _command(self, requests: Path, results: Path) -> list[str]:
        """The `run-batch` command line: the cross-encoder as a pooling model."""
        r = self.reranker
        return pooling_command(
            r.path, r.name, r.max_length, self.engine_settings, requests, results
        )

    def _run_group(self, group: list[list[Pair]]) -> Iterator[np.ndarray]:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="run-batch-score-") as work:
            found: dict[str, BatchResult] = {}
            for path in write_batch_files(self._lines(group), Path(work)):
                results = path.with_name(path.name.replace("requests", "results"))
                env = run_batch_environment(
                    self.engine_settings.device, self.engine_settings.kv_cache_gib
                )
                run_batch_file(self._command(path, results), env, results)
                found.update(read_results([results]))
        self.load_seconds += time.perf_counter() - started  # each subprocess's start included
        yield from self._scores(found, group)

    def _scores(
        self, found: dict[str, BatchResult], group: list[list[Pair]]
    ) -> Iterator[np.ndarray]:
        """Each batch's scores from the query lines' results."""
        for number, pairs in enumerate(group):
            scores: list[float] = []
            start = 0
            for _query, run in groupby(pairs, key=lambda pair: pair[0]):
                documents = len(list(run))
                result = found.get(f"{number}:{start}")
                if result is None or result.scores is None or len(result.scores) != documents:
                    said = result.error if result is not None else "no result"
                    raise RunBatchError(f"vllm run-batch scored no pairs of a batch ({said})")
                scores += result.scores
                start += documents
            yield np.asarray(scores, dtype=np.float32)


class RunBatchJudge(RunBatchScorer):
    """The judge whose engine is `vllm run-batch`: a chat completion line per pair (the
    judge's prompt, one greedy token with its `top_logprobs`, as the Batch API executor
    sends it), on the chat model's engine settings (`generator`'s; it is never started)."""

    def __init__(self, judge: ResolvedJudge, generator) -> None:  # noqa: ANN001 - VllmGenerator
        BatchedScorer.__init__(self, judge)
        self.generator = generator
        self.engine_settings = generator.settings
        self.device = generator.device

    def _lines(self, group: list[list[Pair]]) -> Iterator[dict]:
        """A line per pair, its id `<batch>:<pair>`."""
        for number, pairs in enumerate(group):
            keys = [f"{number}:{i}" for i in range(len(pairs))]
            prompts = judge_prompts(self.generator, pairs, self.reranker.document_tokens, keys)
            for prompt in prompts:
                yield judge_request_line(prompt, self.generator.model.name)

    def _command(self, requests: Path, results: Path) -> list[str]:
        return run_batch_command(self.generator, requests, results)

    def _scores(
        self, found: dict[str, BatchResult], group: list[list[Pair]]
    ) -> Iterator[np.ndarray]:
        for number, pairs in enumerate(group):
            scores = []
            for i in range(len(pairs)):
                result = found.get(f"{number}:{i}")
                if result is None or not result.scores:
                    said = result.error if result is not None else "no result"
                    raise RunBatchError(f"vllm run-batch judged no pair of a batch ({said})")
                scores.append(result.scores[0])
            yield np.asarray(scores, dtype=np.float32)


@dataclass(frozen=True)
class RunBatchScoreExecutor(VllmScoreExecutor):
    """Scores with `reranker` through `vllm run-batch` in a subprocess (`vllm-run-batch`)."""

    def scorer(self, options: ExecuteOptions) -> Scorer:
        if isinstance(self.reranker, ResolvedJudge):
            return RunBatchJudge(self.reranker, self.judge_generator())
        return RunBatchScorer(self.reranker, embed_engine_settings(self.device, self.dtype))


def score_executor(reranker: Reranker, choice: ExecutorChoice | None) -> ScoreExecutor:
    """The score executor `choice` names (`local` when it names none), for `reranker`."""
    choice = choice or ExecutorChoice()
    return executor_class(SCORE, choice.name).chosen(reranker, choice)
