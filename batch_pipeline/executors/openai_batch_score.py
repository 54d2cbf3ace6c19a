"""The `openai-batch` score executor: the yes/no judge (`inference.judge`) on a provider's chat
model, through its Batch API and the driver every family shares (`executors.batch_driver`:
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

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.batch_api import DEVICE, NAME, window_seconds
from batch_pipeline.executors.batch_driver import kept_answers, planned_token_counts
from batch_pipeline.executors.batch_file import (
    CHAT_COMPLETIONS,
    BatchResult,
    judge_request_line,
)
from batch_pipeline.executors.provider_execute import FamilyBatches, ProviderExecutor
from batch_pipeline.executors.scoring import Reranker, ScoreExecutor, judge_tokenizer
from batch_pipeline.inference.judge import ResolvedJudge, judge_prompts
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.stages.score import SCORES_SCHEMA, ScoreSummary
from batch_pipeline.state.staging import StagePath, read_groups


@dataclass(frozen=True)
class OpenAIBatchScoreExecutor(ProviderExecutor, ScoreExecutor):
    """Scores pairs with the judge through a Batch API (see the module docstring); the
    device and dtype are the provider's, so only `auto` is taken for them."""

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

    def batches(self, planned: StagePath) -> FamilyBatches:
        """The plan's pairs as the judge's `/v1/chat/completions` lines, and each answer's
        score as a checkpoint row."""
        summary = ScoreSummary(
            backend=NAME,
            device=DEVICE,
            executor=NAME,
            token_prices=self.api.token_prices,
            window_seconds=window_seconds(self.api.completion_window),
        )
        planned_tokens = planned_token_counts(planned)  # where usage says nothing
        judge = self.reranker
        model = self.api.served_model(judge.name) or judge.name
        tokenizer = judge_tokenizer(judge)

        def requests(done: set[str]) -> Iterable[dict]:
            for group in read_groups(planned, "batch_index", ["input_hash", "query", "document"]):
                pending = [(key, (q, d)) for key, q, d in group if key not in done]
                if not pending:
                    continue
                pairs, ids = [pair for _, pair in pending], [key for key, _ in pending]
                for prompt in judge_prompts(tokenizer, pairs, judge.document_tokens, ids):
                    yield judge_request_line(prompt, model)

        def take(answered: list[BatchResult], output: CheckpointedOutput) -> int:
            kept, tokens = kept_answers(
                answered, lambda r: bool(r.scores), "no log-probabilities", summary, planned_tokens
            )
            summary.stats.pairs += len(kept)
            if kept:
                now = datetime.now(UTC)
                scores = {
                    "input_hash": [r.key for r in kept],
                    "score": pa.array([r.scores[0] for r in kept], pa.float32()),
                    "scored_at": pa.array([now] * len(kept), SCORES_SCHEMA[2].type),
                }
                output.add(pa.table(scores, schema=SCORES_SCHEMA))
                output.done_keys |= {r.key for r in kept}
            return tokens

        return FamilyBatches(
            CHAT_COMPLETIONS, summary, set(planned_tokens), SCORES_SCHEMA, requests, take, "pairs"
        )
