"""Executors: what runs a plan. The run frame's plan and execute stages are one path for every
product; an executor is what differs between embedding and generation, as vLLM's `LLM` runs
`embed` and `generate` through one request and run loop, differing only in params and
outputs.

- `ExecuteOptions`: what a caller may set for one run's plan and execute (the plan's token
  budget and batch size, the dtype width it packs for, how often execute checkpoints).
- `Executor`: plans a product's prepared inputs and runs the plan, loading its engine (an
  embedder, a chat model) only when there is work.

Which executors exist, by model family and name, is `registry.EXECUTORS`: `local` (the
default), `vllm`, `vllm-run-batch` and `openai-batch` embed (the vector index, the ticket
intents); `vllm` (the default), `vllm-run-batch` and `openai-batch` generate on a chat model
(the document briefs); `local` (the default), `vllm`, `vllm-run-batch` and `openai-batch`
score (query, document) pairs with a reranker (a cross-encoder, or a chat model as the
yes/no judge).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from batch_pipeline.config import ConfigError
from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.checkpointed import DEFAULT_CHECKPOINT_EVERY
from batch_pipeline.state.staging import StagePath


@dataclass(frozen=True)
class ExecuteOptions:
    """What a caller may set for one run's plan and execute; every field has a default."""

    plan: PlanSettings = field(default_factory=PlanSettings)  # token budget, batch size
    dtype_bytes: int = 4  # the width the plan packs batches for (2 for half precision)
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY  # batches between checkpoints


@dataclass(frozen=True)
class Capabilities:
    """What an executor can do beyond running a plan, declared on its class
    (`Executor.capabilities`): what the CLI, the resources, the products and the definitions
    ask of an executor, where they would otherwise compare its name."""

    # submits to a provider's Batch API: it takes the API's settings (`api_base`, ...),
    # records its batches in the partition's ledger, which a provider-batch sensor watches,
    # and may answer with another model than the configured one
    provider_batches: bool = False
    # starts an engine of its own (vLLM's, in this process or a run-batch subprocess) rather
    # than run the one the run loads; a generate executor that does needs the chat model's
    # engine settings, so the vLLM generator that holds them, not a stand-in
    own_engine: bool = False
    tensor_parallel: bool = False  # splits one engine over GPUs (`tensor_parallel_size`)
    data_parallel: bool = False  # runs engines side by side (`data_parallel_size`)


@dataclass(frozen=True)
class ExecutorChoice:
    """Which executor runs a product's plan, and its settings, as the caller chose them (the
    CLI's flags or a Dagster resource's fields): a product reads them from its `ProductEnv`,
    never through its constructor's arguments. None and empty fields take the defaults."""

    name: str | None = None  # an executor's name (`--executor`); None: the family's default
    device: str = "auto"  # the inference settings an embedding engine runs on (`--device`)
    dtype: str = "auto"  # (`--dtype`)
    batch_api: Any = None  # where a Batch API executor submits (`BatchApiSettings`)
    engine_options: dict[str, int] = field(default_factory=dict)  # tensor_parallel_size, ...
    # how the caller spells a setting in an error: "--tensor-parallel-size" for the CLI
    spelled: Callable[[str], str] = field(default=lambda setting: setting)


class ChosenSettings:
    """What every executor that runs on inference settings (a device, a dtype) does when it
    is chosen: refuse the settings it cannot run (`settings_problem`), in one line naming the
    setting as its caller spells it (`spelled`), before any stage runs."""

    device: str
    dtype: str
    spelled: Callable[[str], str]

    def __post_init__(self) -> None:
        problem = self.settings_problem(self.device, self.dtype)
        if problem is not None:
            raise ConfigError(f"{self.spelled(problem[0])}: {problem[1]}")

    @staticmethod
    def settings_problem(device: str, dtype: str) -> tuple[str, str] | None:
        """The setting this executor cannot run, and why; None if it runs both."""
        return None


class Executor(Protocol):
    """Plans and runs a product's model inputs (see the module docstring)."""

    capabilities: ClassVar[Capabilities]  # what it can do beyond that

    def plan(self, prepared: StagePath, out: StagePath, options: ExecuteOptions) -> object:
        """Every stale input of `prepared` once, planned into `out`; the plan's summary."""
        ...

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], Any],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> object:
        """Run the plan into `out`, resuming from and writing to `checkpoints`; `load` gives
        the engine and is called only if there is work. The execute's summary."""
        ...
