"""The Batch API's fields, shared by every resource whose executor may be `openai-batch`
(the generation resource for chat models, the inference resource for embeddings): one place
for where a provider's batches go, how long a step waits for them and what they cost."""

import os
from collections.abc import Mapping

import dagster as dg
from pydantic import Field

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.batch_api import BatchApiSettings, window_seconds
from batch_pipeline.executors.registry import capabilities, executor_class, executor_names


class BatchApiResource(dg.ConfigurableResource):
    """A resource's Batch API fields (see the module docstring); a resource subclasses it,
    with the `executor`, `device` and `dtype` fields of the model family it chooses for."""

    executor: str
    device: str
    dtype: str

    api_base: str | None = Field(
        default=None,
        description="openai-batch: the Batch API's base URL, a provider's "
        "(https://api.openai.com/v1) or a self-hosted gateway's.",
    )
    api_key_env: str | None = Field(
        default=None,
        description="A Batch API executor's: the environment variable holding the API key "
        "(the key itself is never configured, logged or recorded); unset, the provider's "
        "own: OPENAI_API_KEY, or ANTHROPIC_API_KEY for anthropic-batch.",
    )
    api_model: str | None = Field(
        default=None,
        description="openai-batch: the provider's name of the model; unset, the configured "
        "model's. A model other than the configured one is another generation.",
    )
    completion_window: str = Field(
        default="24h",
        description="openai-batch: the batches' completion window; it is also the run's "
        "window in its measures.",
    )
    batch_wait_seconds: float = Field(
        default=0.0,
        ge=0,
        description="openai-batch: how long the step waits for its batches before it returns "
        "with what finished; a later run collects the rest (for the briefs, the "
        "provider-batch sensor starts it). 0: submit and return.",
    )
    price_per_million_input_tokens: float = Field(
        default=0.0, ge=0, description="openai-batch: the provider's batch price of input tokens."
    )
    price_per_million_output_tokens: float = Field(
        default=0.0, ge=0, description="openai-batch: the provider's batch price of output tokens."
    )

    def check_executor(self, family: str) -> None:
        """At setup: the executor is one of `family`'s and can run on the resource's device
        and dtype; a ValueError naming the field otherwise (then the Batch API's checks)."""
        name, names = type(self).__name__, executor_names(family)
        if self.executor not in names:
            raise ValueError(
                f"{name}.executor must be one of {', '.join(names)}, got {self.executor!r}"
            )
        problem = executor_class(family, self.executor).settings_problem(self.device, self.dtype)
        if problem is not None:  # found now, before a run collects anything
            raise ValueError(f"{name}.{problem[0]} with executor {self.executor}: {problem[1]}")
        self.check_batch_api(family, self.executor)

    def execution(self) -> ExecutorChoice:
        """Which executor runs the family's plans, on this resource's device and dtype, as a
        product opens it (`ProductEnv.execution`); errors name the resource's fields."""
        name = type(self).__name__
        return ExecutorChoice(
            name=self.executor,
            device=self.device,
            dtype=self.dtype,
            batch_api=self.batch_api(),
            spelled=lambda setting: f"{name}.{setting}",
        )

    def check_batch_api(self, family: str, executor: str) -> None:
        """At setup: `openai-batch` needs `api_base`, and the window must read as one; a
        ValueError naming the field otherwise."""
        name = type(self).__name__
        if capabilities(family, executor).provider_batches and self.api_base is None:
            raise ValueError(
                f"{name}.api_base: the {executor} executor needs the Batch API's base URL"
            )
        try:
            window_seconds(self.completion_window)
        except ConfigError as error:
            raise ValueError(f"{name}.{error}") from None

    def batch_api(self) -> BatchApiSettings | None:
        """Where the openai-batch executor submits: None without api_base."""
        if self.api_base is None:
            return None
        return BatchApiSettings(
            api_base=self.api_base,
            api_key_env=self.api_key_env,
            model=self.api_model,
            completion_window=self.completion_window,
            wait_seconds=self.batch_wait_seconds,
            price_per_million_input_tokens=self.price_per_million_input_tokens,
            price_per_million_output_tokens=self.price_per_million_output_tokens,
        )


ENV_PREFIX = "BATCH_PIPELINE_"
# the fields the shipped definitions take from the environment, and their types
ENV_FIELDS: dict[str, type] = {
    "executor": str,
    "api_base": str,
    "api_key_env": str,
    "api_model": str,
    "completion_window": str,
    "batch_wait_seconds": float,
    "price_per_million_input_tokens": float,
    "price_per_million_output_tokens": float,
}


def from_environment(
    resource: type[BatchApiResource], scope: str, environ: Mapping[str, str] | None = None
) -> BatchApiResource:
    """`resource` as the shipped definitions build it: its executor and Batch API fields
    from `BATCH_PIPELINE_<SCOPE>_<FIELD>` where set (`BATCH_PIPELINE_GENERATION_API_BASE`),
    so that the runs and the provider-batch sensor, which share the resource, reach the same
    provider without a change to the code. Text is taken as `dg.EnvVar`, read when a run or
    a tick starts and never shown (an `api_base` may carry credentials); a number that does
    not read as one fails at load, naming the variable."""
    environ = os.environ if environ is None else environ
    fields: dict[str, object] = {}
    for name, kind in ENV_FIELDS.items():
        variable = f"{ENV_PREFIX}{scope}_{name.upper()}"
        if variable not in environ:
            continue
        if kind is str:
            fields[name] = dg.EnvVar(variable)
            continue
        try:
            fields[name] = kind(environ[variable])
        except ValueError:
            raise ConfigError(f"${variable}: {environ[variable]!r} is not a number") from None
    return resource(**fields)
