"""The cascade's second model (`tickets.cascade`): the tickets the classifier is least sure
of, answered by a chat model that may name only one of the taxonomy's intents or `unknown`
(an output schema's `enum`), greedy, so a rerun repeats its answer.

The answers run through the generate family's executors by name (`cascade.executor`), over
the same prompt plan as the document briefs: the prompts are written as a prepared file,
planned against the engine's context and KV cache, and executed, in the run's process
(`vllm`) or in `vllm run-batch`'s subprocess. An answer that is not valid under the schema
is no answer: the ticket keeps the classifier's.

Each answer carries its cost: the executor's device seconds for the ask, priced at
`cost.device_prices` for its device, shared among the asked tickets by their tokens (prompt
and output).
"""

import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batch_pipeline.config import ConfigError
from batch_pipeline.config.taxonomy import UNKNOWN
from batch_pipeline.config.tickets import CascadeConfig
from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.executors.registry import GENERATE, executor_class
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.chat_models import ChatModel, resolve_chat_model
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.stages.prompt_plan import (
    PromptPlanSettings,
    plan_settings_for,
    prepared_prompts_schema,
)
from batch_pipeline.state.staging import read_table
from batch_pipeline.tickets.cascade import choose_threshold
from batch_pipeline.tickets.training import HeldOutAnswers

PROMPT_VERSION = "tickets-cascade-1"  # the system prompt and schema below: their version
SYSTEM = (
    "You route customer support tickets. Answer with the one intent below that the ticket "
    "asks for, or unknown if none fits.\nIntents: {intents}"
)


def answer_schema(names: list[str]) -> dict:
    """The chat model's output: one of `names`, or unknown."""
    return {
        "type": "object",
        "properties": {"intent": {"type": "string", "enum": [*names, UNKNOWN]}},
        "required": ["intent"],
        "additionalProperties": False,
    }


def vllm_engine(
    chat_model: Path | None, home: Path, device: str
) -> tuple[Generator, PromptPlanSettings]:
    """The chat model at `chat_model` (default the shipped one) on vLLM, and its prompt plan."""
    from batch_pipeline.inference.vllm_generator import VllmGenerator, engine_settings_for

    model = resolve_chat_model(chat_model, home)
    engine = engine_settings_for(model, device, "auto", home / CALIBRATION_FILE)
    return VllmGenerator(model, engine), plan_settings_for(engine)


@dataclass(frozen=True)
class ChatAnswer:
    """The chat model's answer for one ticket: an intent (or unknown), or None with why."""

    intent: str | None
    cost: float  # in the cost section's currency: this answer's share of the ask
    error: str | None = None


class Escalation:
    """A chat model answering tickets with one of `names` (see the module docstring).
    `engine()` gives the chat model's generator and the prompt plan its engine takes; the
    engine itself starts only when a ticket is asked."""

    def __init__(
        self,
        settings: CascadeConfig,
        names: list[str],
        engine: Callable[[], tuple[Generator, PromptPlanSettings]],
        price_per_hour: Callable[[str], float],
    ) -> None:
        self.settings = settings
        self.names = list(names)
        self.engine = engine
        self.price_per_hour = price_per_hour

    @cached_property
    def _engine(self) -> tuple[Generator, PromptPlanSettings]:
        return self.engine()

    @property
    def generator(self) -> Generator:
        return self._engine[0]

    @property
    def plan_settings(self) -> PromptPlanSettings:
        return self._engine[1]

    @property
    def model(self) -> ChatModel:
        return self.generator.model

    @property
    def model_name(self) -> str:
        return self.model.name

    def identity(self) -> dict[str, object]:
        """What decides an answer besides the ticket: the generation's fingerprint has it."""
        return {
            "chat_model": self.model.name,
            "chat_model_fingerprint": self.model.fingerprint,
            "prompt": PROMPT_VERSION,
            "max_tokens": self.settings.max_tokens,
        }

    @property
    def sampling(self) -> Sampling:
        return Sampling(max_tokens=self.settings.max_tokens)  # greedy

    @cached_property
    def executor(self):  # noqa: ANN201 - a generate executor
        chosen = executor_class(GENERATE, self.settings.executor)
        if getattr(chosen, "runs_vllm", False) and not hasattr(self.generator, "settings"):
            raise ConfigError(
                f"tickets.cascade.executor {self.settings.executor} runs vLLM's own engine: it "
                "needs the vLLM generator, not a test's stand-in"
            )
        return chosen(self.generator, self.sampling, answer_schema(self.names), self.plan_settings)

    def answer(self, texts: Mapping[str, str]) -> dict[str, ChatAnswer]:
        """The chat model's answer for each text, by its key (a ticket's input hash)."""
        if not texts:
            return {}
        with tempfile.TemporaryDirectory(prefix="batch-pipeline-cascade-") as scratch:
            folder = Path(scratch)  # the ask's prompts, plan and answers, on local disk
            system = SYSTEM.format(intents=", ".join(self.names))
            prompts = pa.table(
                {
                    "input_hash": list(texts),
                    "system": [system] * len(texts),
                    "user": list(texts.values()),
                },
                schema=prepared_prompts_schema(),
            )
            pq.write_table(prompts, folder / "prepared.parquet")
            options = ExecuteOptions()
            executor = self.executor
            plan = executor.plan(folder / "prepared.parquet", folder / "planned.parquet", options)
            refused = dict(plan.refused)  # too long for the engine's context
            summary = executor.execute(
                folder / "planned.parquet",
                folder / "answers.parquet",
                lambda: self.generator,
                folder / "checkpoints",
                options,
            )
            rows = read_table(
                folder / "answers.parquet",
                ["input_hash", "text", "valid", "error", "prompt_tokens", "output_tokens"],
            ).to_pylist()
        spent = summary.token_cost  # a provider's, at its token prices
        if spent is None:  # the device's time: generating, and starting the engine
            seconds = summary.stats.seconds + summary.stats.load_seconds
            spent = seconds * self.price_per_hour(summary.device) * summary.devices / 3600
        tokens = sum(r["prompt_tokens"] + r["output_tokens"] for r in rows) or 1
        answers = {}
        for row in rows:
            cost = spent * (row["prompt_tokens"] + row["output_tokens"]) / tokens
            intent, error = None, row["error"] or "not valid under the schema"
            if row["valid"]:
                try:
                    intent, error = json.loads(row["text"])["intent"], None
                except (ValueError, KeyError, TypeError) as problem:
                    error = f"unreadable answer: {problem}"
            answers[row["input_hash"]] = ChatAnswer(intent, cost, error)
        for key in texts:
            if key not in answers:
                why = refused.get(key, "the executor gave no answer")
                answers[key] = ChatAnswer(None, 0.0, why)
        return answers


def cascade_plan(
    escalation: Escalation,
    held_out: HeldOutAnswers | None,
    texts: Sequence[str],
    labels: np.ndarray,
) -> dict[str, object]:
    """The cascade's threshold (`cascade.choose_threshold`), chosen on the held-out labelled
    texts (at most `label_budget`, in an order their texts' hashes give), each answered by
    the classifier trained without it and by the chat model; with the chat model's accuracy
    and cost there, for the record."""
    settings = escalation.settings
    chosen: list[int] = []
    if held_out is not None:
        order = sorted(
            range(len(held_out.positions)),
            key=lambda n: hashlib.sha256(texts[held_out.positions[n]].encode()).hexdigest(),
        )
        chosen = order[: settings.label_budget]
    positions = [int(held_out.positions[n]) for n in chosen] if chosen else []
    truth = [escalation.names[labels[p]] if labels[p] >= 0 else UNKNOWN for p in positions]
    answers = escalation.answer({str(n): texts[p] for n, p in zip(chosen, positions, strict=True)})
    chat = [answers[str(n)].intent for n in chosen]
    head_right = [held_out.answers[n] == labels[p] for n, p in zip(chosen, positions, strict=True)]
    chat_right = [a == t for a, t in zip(chat, truth, strict=True)]
    plan = choose_threshold(
        [held_out.confidence[n] for n in chosen], head_right, chat_right,
        settings.target_accuracy, settings.delta,
    )  # fmt: skip
    return {
        **plan.as_dict(),
        "chat_model": escalation.model_name if chosen else None,
        "chat_accuracy": round(float(np.mean(chat_right)), 4) if chosen else None,
        "chat_cost": sum(a.cost for a in answers.values()),
    }


@dataclass(frozen=True)
class DayCascade:
    """A generation's cascade as a day's land uses it: the chat model, and the plan its
    training chose (read when first needed: it is trained with the classifier)."""

    escalation: Escalation
    plan: Callable[[], dict | None]  # the generation's CascadePlan, as its record keeps it
    prefix: str = ""  # the encoder's document prefix: not part of what the chat model reads

    @property
    def model_name(self) -> str:
        return self.escalation.model_name

    def escalate(
        self, inputs: list[tuple[str, str]], confidences: list[float]
    ) -> dict[str, ChatAnswer]:
        """The chat model's answers for the inputs (key, text) whose confidence is under the
        plan's threshold; none where the plan escalates nothing."""
        plan = self.plan()
        threshold = None if plan is None else plan.get("threshold")
        if threshold is None:
            return {}
        asked = {
            key: text.removeprefix(self.prefix)
            for (key, text), confidence in zip(inputs, confidences, strict=True)
            if confidence < threshold
        }
        return self.escalation.answer(asked)
