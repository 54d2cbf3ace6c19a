"""What every stage needs from a chat model: the `Generator` protocol.

`VllmGenerator` (real vLLM: continuous batching over a paged KV cache, prefix caching,
chunked prefill) implements it, and so does `FakeGenerator` (a deterministic stand-in for
unit tests). The prompt plan and the generate stage are typed against this protocol.

A request is a `Prompt`: a key (its input hash), a system part shared by many prompts (vLLM
computes a shared prefix once) and its own user part. `Sampling` holds what decides the
output besides the prompt and the model: greedy or a temperature, and `max_tokens`. An
output is checked against the request's JSON schema by `check_output`; an invalid or
truncated one is that input's failure, with the reason and the finish reason.
"""

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from batch_pipeline.inference.chat_models import ChatModel


@dataclass(frozen=True)
class Prompt:
    """One request: its key (the input hash) and its chat messages."""

    key: str
    system: str
    user: str
    # a cap on its own output below the sampling's `max_tokens` (None: the sampling's); the
    # generation benchmark's varied workload sets it, a product's prompts do not
    max_tokens: int | None = None

    def limit(self, sampling: "Sampling") -> int:
        """The most tokens this prompt's output may have."""
        return min(sampling.max_tokens, self.max_tokens or sampling.max_tokens)

    def messages(self) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": self.user}]


@dataclass(frozen=True)
class Sampling:
    """What decides an output besides its prompt and the model. Greedy by default, so a rerun
    of the same prompt on the same model gives the same output."""

    max_tokens: int = 256
    temperature: float = 0.0  # 0: greedy
    seed: int = 0  # used only when temperature > 0
    repetition_penalty: float = 1.0  # above 1 discourages repeating tokens (small models loop)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be at least 0, got {self.temperature}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be above 0, got {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def identity(self) -> dict[str, object]:
        """What goes into a staleness key: the seed only matters when sampling."""
        values = asdict(self)
        if self.greedy:
            values.pop("seed")
        return values


@dataclass(frozen=True)
class Generation:
    """One output, as the engine returned it."""

    key: str
    text: str
    finish_reason: str  # stop, length, abort, or refused (the plan did not send it)
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0  # prompt tokens taken from the prefix cache


@dataclass
class GenerationStats:
    """What one run of a generator did. `seconds` is the marginal time (generating); the
    engine's start is counted apart (`load_seconds`), as a model load is for embeddings.
    `prefill_seconds` and `decode_seconds` sum vLLM's per-request phases; requests overlap, so
    they are not wall-clock."""

    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_prompt_tokens: int = 0
    seconds: float = 0.0
    load_seconds: float = 0.0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    preemptions: int | None = None  # None: the engine does not report them
    calls: int = 0

    def add(self, other: "GenerationStats") -> None:
        for name, value in asdict(other).items():
            mine = getattr(self, name)
            if value is not None:
                setattr(self, name, value if mine is None else mine + value)

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def output_tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0

    @property
    def total_tokens_per_second(self) -> float:
        return (self.prompt_tokens + self.output_tokens) / self.seconds if self.seconds else 0.0

    @property
    def prefill_tokens_per_second(self) -> float | None:
        """Prompt tokens computed (not taken from the prefix cache) per second of prefill, as
        one request sees it: summed over requests (None: the engine does not report it)."""
        computed = self.prompt_tokens - self.cached_prompt_tokens
        return computed / self.prefill_seconds if self.prefill_seconds else None

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Output tokens per second of decode, as one sequence sees it: summed over requests.
        The batch as a whole decodes about `concurrency` times faster."""
        return self.output_tokens / self.decode_seconds if self.decode_seconds else None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        if not self.prefix_cache_queries:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


@runtime_checkable
class Generator(Protocol):
    """A chat model that turns prompts into outputs. Constructing one is cheap: the engine
    starts on the first `generate`, so a run with nothing to generate loads nothing."""

    model: ChatModel
    device: str
    dtype: str
    devices: int  # devices its engines hold: what an hour of execute costs, in device hours

    def token_counts(self, prompts: list[Prompt]) -> list[int]:
        """Each prompt's tokens, chat template included, by the model's own tokenizer."""
        ...

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """`text` cut to its first `max_tokens` tokens, and whether it was cut."""
        ...

    def control_tokens(self) -> tuple[str, ...]:
        """The tokenizer's special and added tokens, as text: what a document must not carry
        into a prompt (`text.control_tokens`)."""
        ...

    def generate(
        self,
        prompts: list[Prompt],
        sampling: Sampling,
        schema: dict | None = None,
        stats: GenerationStats | None = None,
        on_finished: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """Generate one output per prompt, in prompt order; with `schema`, decoding is
        constrained to it. `on_finished` is called with how many prompts just finished, as
        they finish (in any order); an engine that starts on this call adds its start's
        seconds to `stats.load_seconds` before the first."""
        ...

    def stream(
        self,
        prompts: Iterable[Prompt],
        sampling: Sampling,
        schema: dict | None = None,
        stats: GenerationStats | None = None,
        window: int = 256,
    ) -> Iterator[Generation]:
        """Generate one output per prompt, yielded as each finishes (in any order), with up
        to `window` prompts handed to the engine ahead, refilled as they finish: the engine
        never waits for the slowest of a batch. `prompts` is read lazily. An engine that
        starts on this call adds its start's seconds to `stats.load_seconds` before the
        first output; the rest of `stats` is complete once the iterator is exhausted."""
        ...


@dataclass(frozen=True)
class CheckedOutput:
    valid: bool
    reason: str | None = None  # why not, for a failure
    value: object = field(default=None, compare=False)  # the parsed JSON, when valid


def check_output(text: str, finish_reason: str, schema: dict | None) -> CheckedOutput:
    """Whether an output is usable: finished (not cut at `max_tokens`) and, with a schema,
    JSON that validates against it. The reason names what failed."""
    if finish_reason == "length":
        return CheckedOutput(False, "truncated at max_tokens (finish_reason=length)")
    if finish_reason not in ("stop", "fake"):
        return CheckedOutput(False, f"not finished (finish_reason={finish_reason})")
    if schema is None:
        return CheckedOutput(True, value=text)
    try:
        value = json.loads(text)
    except ValueError as error:
        return CheckedOutput(False, f"not JSON: {error}")
    import jsonschema

    problem = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(value)
    )
    if problem is not None:
        where = "/".join(str(p) for p in problem.absolute_path) or "(root)"
        return CheckedOutput(False, f"does not match the schema at {where}: {problem.message}")
    return CheckedOutput(True, value=value)
