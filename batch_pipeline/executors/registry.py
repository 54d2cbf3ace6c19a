"""The registry of executors: one line per executor, keyed by the model family it runs
(`embed`, `generate`, `score`) and the name `--executor` and the resources' `executor` field
take.

Every executor of a family plans alike (the family's plan: token-budget batches for an
embedder, the prompt plan for a chat model) and differs in what runs the plan. Adding one is
a module in `batch_pipeline/executors/` and a line here; the CLI's choices, the resources'
checks and the products' lookup all read this table.
"""

from importlib import import_module

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import Capabilities
from batch_pipeline.names import EMBED, GENERATE, SCORE

# family -> executor name -> "module:class"; each family's first line is its default
EXECUTORS: dict[str, dict[str, str]] = {
    EMBED: {
        "local": "batch_pipeline.executors.embedding:EmbeddingExecutor",
        "vllm": "batch_pipeline.executors.vllm_embedding:VllmEmbeddingExecutor",
        "vllm-run-batch": "batch_pipeline.executors.vllm_embedding:RunBatchEmbeddingExecutor",
        "openai-batch": "batch_pipeline.executors.openai_batch_embedding:"
        "OpenAIBatchEmbeddingExecutor",
    },
    GENERATE: {
        "vllm": "batch_pipeline.executors.generation:GenerationExecutor",
        "vllm-run-batch": "batch_pipeline.executors.run_batch:RunBatchExecutor",
        "openai-batch": "batch_pipeline.executors.openai_batch:OpenAIBatchExecutor",
        "anthropic-batch": "batch_pipeline.executors.anthropic_batch:AnthropicBatchExecutor",
    },
    SCORE: {
        "local": "batch_pipeline.executors.scoring:ScoreExecutor",
        "vllm": "batch_pipeline.executors.scoring:VllmScoreExecutor",
        "vllm-run-batch": "batch_pipeline.executors.scoring:RunBatchScoreExecutor",
        "openai-batch": "batch_pipeline.executors.openai_batch_score:OpenAIBatchScoreExecutor",
    },
}


def executor_names(family: str) -> tuple[str, ...]:
    """The executors of `family`, its default first; a ConfigError for an unknown family."""
    if family not in EXECUTORS:
        raise ConfigError(f"unknown model family {family!r}; families: {', '.join(EXECUTORS)}")
    return tuple(EXECUTORS[family])


def default_executor(family: str) -> str:
    """What runs `family`'s plans when no executor is named."""
    return executor_names(family)[0]


def all_executor_names() -> list[str]:
    """Every executor's name, of any family (what `--executor` accepts)."""
    return sorted({name for names in EXECUTORS.values() for name in names})


def unknown_executor(family: str, name: str) -> str | None:
    """Why `family` cannot run `name`, naming the family's executors; None if it can."""
    names = executor_names(family)
    if name in names:
        return None
    return f"{name!r} runs no {family} model; {family} executors: {', '.join(names)}"


def check_executor(family: str, name: str | None, spelled: str = "executor") -> str:
    """`name`, or the family's default when None; a ConfigError in one line, naming the
    family's executors, when `family` has none called so."""
    if name is None:
        return default_executor(family)
    problem = unknown_executor(family, name)
    if problem is not None:
        raise ConfigError(f"{spelled} {problem}")
    return name


def executor_class(family: str, name: str | None) -> type:
    """The class of `family`'s executor `name` (the default when None), imported on demand."""
    module, _, attribute = EXECUTORS[family][check_executor(family, name)].partition(":")
    return getattr(import_module(module), attribute)


def capabilities(family: str, name: str | None) -> Capabilities:
    """What `family`'s executor `name` (the default when None) declares it can do."""
    return executor_class(family, name).capabilities


def executors_with(capability: str, family: str | None = None) -> list[str]:
    """The names of the executors that declare `capability` (a field of `Capabilities`), as
    a message names them: `family`'s in the registry's order, or every family's, sorted."""
    families = EXECUTORS if family is None else {family: executor_names(family)}
    found = [
        name
        for each, names in families.items()
        for name in names
        if getattr(capabilities(each, name), capability)
    ]
    return found if family is not None else sorted(set(found))


def batch_client(wire: str | None) -> type:
    """The client of the provider API a recorded batch went through (its `wire`; None for
    one recorded before batches said so: the OpenAI Batch API's), from the executors that
    submit to one (`provider_batches`): a batch is asked, collected and cancelled through
    the API that made it, whichever executor is configured now."""
    clients = {
        cls.client.wire: cls.client
        for family, names in EXECUTORS.items()
        for name in names
        if (cls := executor_class(family, name)).capabilities.provider_batches
    }
    chosen = clients.get(wire or "openai")
    if chosen is None:
        raise ConfigError(
            f"a provider batch was sent through the {wire!r} API, which no executor here "
            f"speaks (they speak {', '.join(sorted(clients))})"
        )
    return chosen
