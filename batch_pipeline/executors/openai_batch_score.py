"""The `openai-batch` score executor: the yes/no judge (`inference.judge`) on a provider's chat
model, through its Batch API and the driver every family shares (`executors.batch_api`:
collect, submit, wait, the ledger, the key), checkpointed as every score executor's scores
are.

Each planned pair is one `/v1/chat/completions` line (`batch_file.judge_request_line`): the
judge's prompt, its document cut to the judge's tokens by the chat model's tokenizer, greedy,
one output token with its `top_logprobs`; the answer's score is P("yes") / (P("yes") +
P("no")) from them, as the judge scores in process. The custom id is the pair's staleness
key, so a batch one run submitted is collected by a later run of the same plan. The provider's
model is the judge's unless `api.model` names another. A cross-encoder is refused: a Batch
API scores pairs only as chat completions.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

import pyarrow as pa

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import Capabilities, ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.batch_api import (
    DEVICE,
    NAME,
    BatchApiSettings,
    BatchDriver,
    BatchLedger,
    BatchWork,
    kept_answers,
    planned_token_counts,
    provider_settings_problem,
    run_of,
)
from batch_pipeline.executors.batch_file import (
    CHAT_COMPLETIONS,
    BatchResult,
    judge_request_line,
)
from batch_pipeline.executors.scoring import Reranker, ScoreExecutor, judge_tokenizer
from batch_pipeline.inference.judge import ResolvedJudge, judge_prompts
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages import EXECUTE
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.stages.score import SCORES_SCHEMA, ScoreSummary
from batch_pipeline.state.staging import StagePath, read_groups


@dataclass(frozen=True)
class OpenAIBatchScoreExecutor(ScoreExecutor):
    """Scores pairs with the judge through a Batch API (see the module docstring); the
    device and dtype are the provider's, so only `auto` is taken for them."""

    # the frame gives it the partition's ledger (`with_ledger`)
    capabilities: ClassVar[Capabilities] = Capabilities(provider_batches=True)
    api: BatchApiSettings | None = None
    ledger: BatchLedger | None = None
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def chosen(cls, reranker: Reranker, choice: ExecutorChoice) -> "OpenAIBatchScoreExecutor":
        return cls(reranker, choice.device, choice.dtype, choice.spelled, api=choice.batch_api)

    def __post_init__(self) -> None:
        if not isinstance(self.reranker, ResolvedJudge):
            raise ConfigError(
                f"{self.spelled('executor')}: {NAME} scores pairs with the judge (reranker "
                "model: judge) as chat completions; a cross-encoder runs on local, vllm or "
                "vllm-run-batch"
            )
        if self.api is None:
            raise ConfigError(
                f"{self.spelled('api_base')}: the {NAME} executor needs the Batch API's address"
            )
        super().__post_init__()

    settings_problem = staticmethod(provider_settings_problem)

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], object],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> ScoreSummary:
        """Collect, submit and wait (`executors.batch_api`); `load` is not used (the engine
        is the provider's)."""
        if self.ledger is None:
            raise ConfigError(f"the {NAME} executor runs inside a partition's run (its ledger)")
        self.api.api_key()  # a missing key fails before anything is written
        started = time.perf_counter()
        summary = ScoreSummary(
            backend=NAME, device=DEVICE, executor=NAME, token_prices=self.api.token_prices
        )
        planned_tokens = planned_token_counts(planned)  # where usage says nothing
        keys = set(planned_tokens)
        judge = self.reranker
        model = self.api.served_model(judge.name) or judge.name
        with CheckpointedOutput(
            out, checkpoints, SCORES_SCHEMA, every=1, started=started
        ) as output:
            resumed = output.resume(keys & output.done_keys)
            summary.resumed_inputs = len(resumed)
            tracker = Progress(
                EXECUTE.name,
                len(keys) - len(resumed),
                progress,
                unit="pairs",
                interval=progress_interval,
            )
            tracker.start()
            tokenizer = judge_tokenizer(judge)

            def requests(done: set[str]) -> Iterable[dict]:
                for group in read_groups(
                    planned, "batch_index", ["input_hash", "query", "document"]
                ):
                    pending = [(key, (q, d)) for key, q, d in group if key not in done]
                    if not pending:
                        continue
                    pairs, ids = [pair for _, pair in pending], [key for key, _ in pending]
                    for prompt in judge_prompts(tokenizer, pairs, judge.document_tokens, ids):
                        yield judge_request_line(prompt, model)

            def take(answered: list[BatchResult]) -> None:
                kept, tokens = kept_answers(
                    answered,
                    lambda r: bool(r.scores),
                    "no log-probabilities",
                    summary,
                    planned_tokens,
                )
                summary.stats.pairs += len(kept)
                if kept:
                    now = datetime.now(UTC)
                    output.add(
                        pa.table(
                            {
                                "input_hash": [r.key for r in kept],
                                "score": pa.array([r.scores[0] for r in kept], pa.float32()),
                                "scored_at": pa.array([now] * len(kept), SCORES_SCHEMA[2].type),
                            },
                            schema=SCORES_SCHEMA,
                        )
                    )
                    output.done_keys |= {r.key for r in kept}
                tracker.advance(len(answered), tokens)

            driver = BatchDriver(
                self.api, self.ledger, run_of(out), summary.batches, self.sleep, set(resumed)
            )
            driver.drive_counted(
                BatchWork(CHAT_COMPLETIONS, keys, output, requests, take), tracker, summary
            )
            output.finish(summary, planned)
        return summary
