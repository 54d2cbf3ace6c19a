"""The `openai-batch` generation executor: the prompt plan as `/v1/chat/completions` lines of
OpenAI batch files, run by a provider's Batch API through the driver every family shares
(`executors.batch_driver`: collect, submit, wait, the ledger, the key). Its plan is the
in-process executor's (the local tokenizer counts the prompts); an answer is judged as every
generation executor's is, and a request with no answer is not a brief: it is planned again.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.batch_api import DEVICE, NAME, window_seconds
from batch_pipeline.executors.batch_file import CHAT_COMPLETIONS, BatchResult, request_line
from batch_pipeline.executors.generation import GenerationExecutor
from batch_pipeline.executors.provider_execute import FamilyBatches, ProviderExecutor
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.stages.generate import (
    counted,
    generations_schema,
    output_rows,
    planned_prompts,
    summary_of_plan,
)
from batch_pipeline.stages.prompt_plan import PromptPlanSettings, plan_record
from batch_pipeline.state.staging import StagePath, read_table

__all__ = ["NAME", "OpenAIBatchExecutor"]


@dataclass(frozen=True)
class OpenAIBatchExecutor(ProviderExecutor, GenerationExecutor):
    """Generates through a Batch API (see the module docstring)."""

    @classmethod
    def chosen(
        cls,
        generator: Generator,
        sampling: Sampling,
        schema: dict | None,
        settings: PromptPlanSettings,
        choice: ExecutorChoice,
    ) -> "OpenAIBatchExecutor":
        """This executor, submitting where `choice.batch_api` says (a ConfigError naming the
        caller's `api_base` without one)."""
        if choice.batch_api is None:
            raise ConfigError(
                f"{choice.spelled('api_base')}: the {cls.name} executor needs the Batch API's "
                "address"
            )
        return cls(generator, sampling, schema, settings, api=choice.batch_api)

    @property
    def model_name(self) -> str:
        return (self.api.model if self.api else None) or self.generator.model.name

    def batches(self, planned: StagePath) -> FamilyBatches:
        """The plan's prompts as `/v1/chat/completions` lines, and each answer judged as
        every generation executor's outputs are (`output_rows`)."""
        record = plan_record(planned)
        summary = summary_of_plan(record, DEVICE, "provider")
        summary.executor = self.name
        summary.window_seconds = window_seconds(self.api.completion_window)
        summary.token_prices = self.api.token_prices
        keys = set(read_table(planned, ["input_hash"])["input_hash"].to_pylist())

        def requests(done: set[str]) -> Iterable[dict]:
            for prompt in planned_prompts(planned):  # streamed
                if prompt.key not in done:
                    yield request_line(prompt, self.model_name, self.sampling, self.schema)

        def take(answered: list[BatchResult], output: CheckpointedOutput) -> int:
            stats = summary.stats
            stats.requests += len(answered)
            stats.prompt_tokens += sum(r.prompt_tokens for r in answered)
            stats.output_tokens += sum(r.output_tokens for r in answered)
            stats.calls += 1
            summary.chunks_run += 1
            if answered:
                output.add(output_rows(answered, self.schema, summary))
                output.done_keys |= {r.key for r in answered}
            return 0  # its progress counts prompts

        return FamilyBatches(
            CHAT_COMPLETIONS,
            summary,
            keys,
            generations_schema(),
            requests,
            take,
            unit="prompts",
            total=record.prompts,
            counted=counted(summary),
        )
