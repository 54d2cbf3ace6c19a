"""The one execute every Batch API executor runs, whatever its model family, as vLLM's `LLM`
runs embed, score and generate through one request and run loop: check the ledger and the
key, start the family's summary, copy what the checkpoints hold, then collect, submit and wait
through the driver (`executors.batch_driver`), and finish the output. A family gives only what
differs (`FamilyBatches`): the endpoint its lines ask, its summary, its request lines and the
rows it makes of an answer.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import Capabilities, ExecuteOptions
from batch_pipeline.executors.batch_api import (
    NAME,
    BatchApiSettings,
    BatchLedger,
    provider_settings_problem,
)
from batch_pipeline.executors.batch_client import OpenAIBatches
from batch_pipeline.executors.batch_driver import BatchDriver, BatchWork, run_of
from batch_pipeline.executors.batch_file import BatchResult
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages import EXECUTE
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.state.staging import StagePath


@dataclass
class FamilyBatches:
    """What one family's execute hands the shared loop for one plan."""

    endpoint: str  # what its request lines ask (`/v1/embeddings`, `/v1/chat/completions`)
    summary: Any  # its execute summary, started for a provider (prices, window)
    keys: set[str]  # the plan's inputs
    schema: pa.Schema  # its checkpoint rows
    requests: Callable[[set[str]], Iterable[dict]]  # the lines of the inputs not in a set
    # a settled batch's answers into the output, counted in the summary: the tokens they took
    take: Callable[[list[BatchResult], CheckpointedOutput], int]
    unit: str = "inputs"  # what its progress counts
    total: int | None = None  # inputs its progress counts (None: the plan's keys)
    # what hears the rows resumed from checkpoints, for a family that counts them
    counted: Callable[[pa.Table], None] | None = None


@dataclass(frozen=True)
class ProviderExecutor:
    """What makes an executor of any family a Batch API one: the provider's settings, the
    partition's ledger (the frame's, `with_ledger`) and the shared execute; the family gives
    `batches(planned)`."""

    # the frame gives it the partition's ledger; the device and dtype are the provider's
    capabilities: ClassVar[Capabilities] = Capabilities(provider_batches=True)
    settings_problem = staticmethod(provider_settings_problem)
    client: ClassVar[type] = OpenAIBatches  # the provider's API (`batch_client.BatchClient`)
    name: ClassVar[str] = NAME  # the executor's name in the registry and its summaries
    api: BatchApiSettings | None = None
    ledger: BatchLedger | None = None
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def batches(self, planned: StagePath) -> FamilyBatches:
        """The family's part of the execute of `planned`."""
        raise NotImplementedError

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], object],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> Any:
        """Collect, submit and wait (`executors.batch_driver`); `load` is not used (the engine
        is the provider's). The family's summary."""
        if self.api is None or self.ledger is None:
            raise ConfigError(
                f"the {self.name} executor runs inside a partition's run (its ledger), with the "
                "Batch API's address (api_base)"
            )
        self.api.api_key(self.client.key_env)  # a missing key fails before anything is written
        started = time.perf_counter()
        family = self.batches(planned)
        summary = family.summary
        with CheckpointedOutput(
            out, checkpoints, family.schema, every=1, started=started
        ) as output:
            resumed = output.resume(family.keys & output.done_keys, family.counted)
            summary.resumed_inputs = len(resumed)
            total = len(family.keys) if family.total is None else family.total
            tracker = Progress(
                EXECUTE.name,
                max(0, total - len(resumed)),
                progress,
                unit=family.unit,
                interval=progress_interval,
            )
            tracker.start()

            def take(answered: list[BatchResult]) -> None:
                tracker.advance(len(answered), family.take(answered, output))

            driver = BatchDriver(
                self.api,
                self.ledger,
                run_of(out),
                summary.batches,
                self.sleep,
                set(resumed),
                provider=self.client,
            )
            work = BatchWork(family.endpoint, family.keys, output, family.requests, take)
            driver.drive_counted(work, tracker, summary)
            output.finish(summary, planned)
        return summary
