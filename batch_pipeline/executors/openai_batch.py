"""The `openai-batch` generation executor: the prompt plan as `/v1/chat/completions` lines of
OpenAI batch files, run by a provider's Batch API through the driver every family shares
(`executors.batch_api`: collect, submit, wait, the ledger, the key). Its plan is the
in-process executor's (the local tokenizer counts the prompts); an answer is judged as every
generation executor's is, and a request with no answer is not a brief: it is planned again.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import Capabilities, ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.batch_api import (
    DEVICE,
    NAME,
    BatchApiSettings,
    BatchDriver,
    BatchLedger,
    BatchWork,
    run_of,
    window_seconds,
)
from batch_pipeline.executors.batch_file import CHAT_COMPLETIONS, BatchResult, request_line
from batch_pipeline.executors.generation import GenerationExecutor
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages import EXECUTE
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.stages.generate import (
    GenerateSummary,
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
class OpenAIBatchExecutor(GenerationExecutor):
    """Generates through a Batch API (see the module docstring)."""

    # the frame gives it the partition's ledger (`with_ledger`)
    capabilities: ClassVar[Capabilities] = Capabilities(provider_batches=True)
    api: BatchApiSettings | None = None
    ledger: BatchLedger | None = None
    sleep: Callable[[float], None] = time.sleep

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
                f"{choice.spelled('api_base')}: the {NAME} executor needs the Batch API's address"
            )
        return cls(generator, sampling, schema, settings, api=choice.batch_api)

    @property
    def model_name(self) -> str:
        return (self.api.model if self.api else None) or self.generator.model.name

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
        """Collect, submit and wait (`executors.batch_api`); `load` is not used (the engine
        is the provider's)."""
        if self.api is None or self.ledger is None:
            raise ConfigError(f"the {NAME} executor needs the Batch API's address (api_base)")
        self.api.api_key()  # a missing key fails before anything is written
        started = time.perf_counter()
        record = plan_record(planned)
        summary = summary_of_plan(record, DEVICE, "provider")
        summary.executor = NAME
        summary.window_seconds = window_seconds(self.api.completion_window)
        summary.token_prices = self.api.token_prices
        with CheckpointedOutput(
            out, checkpoints, generations_schema(), every=1, started=started
        ) as output:
            keys = set(read_table(planned, ["input_hash"])["input_hash"].to_pylist())
            resumed = output.resume(keys & output.done_keys, counted(summary))
            summary.resumed_inputs = len(resumed)
            tracker = Progress(
                EXECUTE.name,
                max(0, record.prompts - len(resumed)),
                progress,
                unit="prompts",
                interval=progress_interval,
            )
            tracker.start()
            driver = BatchDriver(
                self.api, self.ledger, run_of(out), summary.batches, self.sleep, set(resumed)
            )

            def requests(done: set[str]) -> Iterable[dict]:
                for prompt in planned_prompts(planned):  # streamed
                    if prompt.key not in done:
                        yield request_line(prompt, self.model_name, self.sampling, self.schema)

            def take(answered: list[BatchResult]) -> None:
                stats = summary.stats
                stats.requests += len(answered)
                stats.prompt_tokens += sum(r.prompt_tokens for r in answered)
                stats.output_tokens += sum(r.output_tokens for r in answered)
                stats.calls += 1
                summary.chunks_run += 1
                if answered:
                    output.add(output_rows(answered, self.schema, summary))
                    output.done_keys |= {r.key for r in answered}
                tracker.advance(len(answered), 0)

            began = time.perf_counter()
            driver.drive(BatchWork(CHAT_COMPLETIONS, keys, output, requests, take))
            summary.stats.seconds = time.perf_counter() - began  # submitting, polling, reading
            tracker.finish()
            output.finish(summary, planned)
        return summary
