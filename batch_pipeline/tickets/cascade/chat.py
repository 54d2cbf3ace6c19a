"""The cascade's second model (`tickets.cascade`): the tickets the classifier is least sure
of, answered by a chat model that may name only one of the taxonomy's intents or `unknown`
(an output schema's `enum`), greedy, so a rerun repeats its answer.

The answers run through the generate family's executors by name (`cascade.executor`), over
the same prompt plan as the document briefs: the prompts are written as a prepared file,
planned against the engine's context and KV cache, and executed, in the run's process
(`vllm`), in `vllm run-batch`'s subprocess, or through a provider's Batch API
(`openai-batch`, its batches recorded in the partition's ledger as the briefs' are). An
answer that is not valid under the schema is no answer: the ticket keeps the classifier's.
An answer a provider has not returned yet is awaited: the ticket lands with the classifier's
intent, marked `awaiting`, and the next run asks again, which collects it.

An answer is kept (the tracking store's `chat_answers`) under its question: the chat model,
the prompt, the list of intents, and the text. Whoever asks that question of that text again
(a rerun, the next generation's held-out texts, a day's ticket seen before, the review's
labelled tickets) takes the answer, at no cost, instead of asking.

Each answer carries its cost: the executor's device seconds for the ask (generating, and
starting the engine), priced at `cost.device_hour` for its device, or a provider's tokens at
its batch prices; shared among the asked tickets by their tokens (prompt and output).

A ticket is the customer's text: the chat model's control tokens written in it (`<|im_start|>`
and the like) are broken before it reaches the prompt (`text.control_tokens`), as a
document's are for its brief, so a ticket cannot open a turn of its own and name its intent.
"""

import hashlib
import json
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batch_pipeline.config import ConfigError
from batch_pipeline.config.taxonomy import UNKNOWN
from batch_pipeline.config.tickets import CascadeConfig
from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
from batch_pipeline.executors.batch_api import BatchApiSettings, BatchLedger, with_ledger
from batch_pipeline.executors.generation import GenerationExecutor, generation_executor
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.stages.prompt_plan import (
    PromptPlanSettings,
    plan_settings_for,
    prepared_prompts_schema,
)
from batch_pipeline.state.staging import read_table
from batch_pipeline.text.control_tokens import neutralised
from batch_pipeline.tickets.cascade.threshold import choose_threshold
from batch_pipeline.tickets.classifier.training import HeldOutAnswers

# the system prompt and schema below, and the ticket's control tokens broken: their version
PROMPT_VERSION = "tickets-cascade-2"
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


def vllm_engine(model: ChatModel, home: Path, device: str) -> tuple[Generator, PromptPlanSettings]:
    """The chat model on vLLM, and its prompt plan."""
    from batch_pipeline.inference.vllm_generator import VllmGenerator, engine_settings_for

    engine = engine_settings_for(model, device, "auto", home / CALIBRATION_FILE)
    return VllmGenerator(model, engine), plan_settings_for(engine)


CASCADE_PARTITION = "cascade"  # a day's provider batches: under `<day>/cascade`
HELD_OUT_PARTITION = "held-out/cascade"  # the threshold's held-out texts' batches
EVALUATION_PARTITION = "evaluation/cascade"  # the review's labelled tickets' batches
AWAITED = "the chat model's answer is still at the provider: the next run collects it"
# how the cascade's section spells an executor's setting, where it differs from the resources'
SPELLED = {"api_base": "batch_api.api_base"}


def cascade_partition(partition: str) -> bool:
    """Whether a ledger partition holds the cascade's batches (not a day's embeddings')."""
    return partition.endswith(f"/{CASCADE_PARTITION}")


@dataclass(frozen=True)
class ChatAnswer:
    """The chat model's answer for one ticket: an intent (or unknown), or None with why
    (`awaiting`: not back from a provider yet)."""

    intent: str | None
    cost: float  # in the cost section's currency: this answer's share of the ask
    error: str | None = None
    awaiting: bool = False
    reused: bool = False  # a kept answer to the same question of the same text: not asked


class AnswerBook(Protocol):
    """Where answers are kept by question and text key (the tracking store)."""

    def chat_answers(self, question: str, text_keys: Iterable[str]) -> dict[str, str]: ...

    def record_chat_answers(self, question: str, answers: Mapping[str, str]) -> None: ...


class CascadePending(Exception):
    """The cascade's threshold cannot be chosen yet: the chat model's answers on the
    held-out texts are still at the provider."""


class Escalation:
    """`model` answering tickets with one of `names` (see the module docstring). `engine()`
    gives its generator and the prompt plan its engine takes, only when a ticket is asked
    (the generation's fingerprint needs the model's identity alone); the engine itself
    starts when the first answer is generated. `book` keeps the answers (None: each ask is
    asked)."""

    def __init__(
        self,
        settings: CascadeConfig,
        names: list[str],
        model: ChatModel,
        engine: Callable[[], tuple[Generator, PromptPlanSettings]],
        price_per_hour: Callable[[str], float],
        book: AnswerBook | None = None,
    ) -> None:
        self.settings = settings
        self.names = list(names)
        self.model = model
        self.engine = engine
        self.price_per_hour = price_per_hour
        self.book = book

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
    def model_name(self) -> str:
        return self.model.name

    @property
    def served_model(self) -> str | None:
        """The provider's model, where it is named and is not the chat model: the answers are
        then another model's."""
        api = self.settings.batch_api
        if api is None or api.model in (None, self.model.name):
            return None
        return api.model

    def identity(self) -> dict[str, object]:
        """What decides an answer besides the ticket: the generation's fingerprint has it,
        and its hash with the intents' names (`question`)."""
        asked = {
            "chat_model": self.model.name,
            "chat_model_fingerprint": self.model.fingerprint,
            "prompt": PROMPT_VERSION,
            "max_tokens": self.settings.max_tokens,
            **({"served_model": self.served_model} if self.served_model else {}),
        }
        return {**asked, "question": question_key(asked, self.names)}

    @property
    def question(self) -> str:
        """The question every ticket is asked: the same one, the same answers."""
        return str(self.identity()["question"])

    @property
    def batch_api(self) -> BatchApiSettings | None:
        """The provider's address and terms, for the openai-batch executor."""
        api = self.settings.batch_api
        if api is None:
            return None
        return BatchApiSettings(
            api.api_base,
            api.api_key_env,
            api.model,
            api.completion_window,
            wait_seconds=api.wait_seconds,
            price_per_million_input_tokens=api.price_per_million_input_tokens,
            price_per_million_output_tokens=api.price_per_million_output_tokens,
        )

    @property
    def sampling(self) -> Sampling:
        return Sampling(max_tokens=self.settings.max_tokens)  # greedy

    @cached_property
    def executor(self) -> GenerationExecutor:
        """The generate executor `tickets.cascade.executor` names, with the provider's
        address where it sends batches (errors name the cascade's settings)."""
        choice = ExecutorChoice(
            name=self.settings.executor,
            batch_api=self.batch_api,
            # the Batch API's settings are the cascade's `batch_api` section
            spelled=lambda setting: f"tickets.cascade.{SPELLED.get(setting, setting)}",
        )
        return generation_executor(
            choice, self.generator, self.sampling, answer_schema(self.names), self.plan_settings
        )

    def executor_for(self, ledger: BatchLedger | None) -> GenerationExecutor:
        """The executor, recording its provider batches in `ledger` where it sends any."""
        executor = self.executor
        if not executor.capabilities.provider_batches:
            return executor
        if ledger is None:
            raise ConfigError(f"tickets.cascade.executor {self.settings.executor}: needs a ledger")
        return with_ledger(executor, ledger)

    def answer(
        self, texts: Mapping[str, str], run_id: str = "cascade", ledger: BatchLedger | None = None
    ) -> dict[str, ChatAnswer]:
        """The chat model's answer for each text, by its key (a ticket's input hash): kept
        ones from the book, the rest asked; a provider's batches are recorded in `ledger`,
        under `run_id`."""
        by_text = {key: text_key(text) for key, text in texts.items()}
        kept = self.book.chat_answers(self.question, set(by_text.values())) if self.book else {}
        first: dict[str, str] = {}  # each text not kept: the first key that asks it
        for key, k in by_text.items():
            if k not in kept:
                first.setdefault(k, key)
        fresh = self._ask({key: texts[key] for key in first.values()}, run_id, ledger)
        if self.book is not None:
            self.book.record_chat_answers(
                self.question,
                {by_text[key]: a.intent for key, a in fresh.items() if a.intent is not None},
            )
        answers = {}
        for key, k in by_text.items():
            if k in kept:
                answers[key] = ChatAnswer(kept[k], 0.0, reused=True)
            elif first[k] == key:
                answers[key] = fresh[key]
            else:  # the same text twice in one ask: asked once, its cost on the first
                answer = fresh[first[k]]
                answers[key] = replace(answer, cost=0.0, reused=answer.intent is not None)
        return answers

    def _ask(
        self, texts: Mapping[str, str], run_id: str, ledger: BatchLedger | None
    ) -> dict[str, ChatAnswer]:
        """The chat model's answer for each text, asked now."""
        if not texts:
            return {}
        executor = self.executor_for(ledger)
        with tempfile.TemporaryDirectory(prefix="batch-pipeline-cascade-") as scratch:
            folder = Path(scratch) / run_id  # the ask's files; the run is its folder's name
            folder.mkdir()
            system = SYSTEM.format(intents=", ".join(self.names))
            controls = self.generator.control_tokens()  # the tokenizer's: no engine starts
            prompts = pa.table(
                {
                    "input_hash": list(texts),
                    "system": [system] * len(texts),
                    "user": [neutralised(text, controls)[0] for text in texts.values()],
                },
                schema=prepared_prompts_schema(),
            )
            pq.write_table(prompts, folder / "prepared.parquet")
            options = ExecuteOptions()
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
        pending = set(texts) - set(answers) - set(refused) - set(summary.failed_inputs)
        for key in texts:
            if key in pending and executor.capabilities.provider_batches:
                answers[key] = ChatAnswer(None, 0.0, AWAITED, awaiting=True)
            elif key not in answers:
                why = refused.get(key) or summary.failed_inputs.get(key)
                answers[key] = ChatAnswer(None, 0.0, why or "the executor gave no answer")
        return answers


@dataclass(frozen=True)
class HeldOutCascade:
    """What the cascade's threshold is chosen on: the held-out labelled texts (at most
    `label_budget`, in an order their texts' hashes give), each with the calibrated
    confidence and rightness of the classifier trained without it, and its true intent."""

    texts: list[str]
    confidence: list[float]
    head_right: list[bool]
    truth: list[str]

    @classmethod
    def of(
        cls,
        held_out: HeldOutAnswers | None,
        texts: Sequence[str],
        labels: np.ndarray,
        names: list[str],
        budget: int,
    ) -> "HeldOutCascade":
        if held_out is None:
            return cls([], [], [], [])
        order = sorted(
            range(len(held_out.positions)),
            key=lambda n: text_key(texts[held_out.positions[n]]),
        )[:budget]
        positions = [int(held_out.positions[n]) for n in order]
        return cls(
            [texts[p] for p in positions],
            [float(held_out.confidence[n]) for n in order],
            [bool(held_out.answers[n] == labels[p]) for n, p in zip(order, positions, strict=True)],
            [names[labels[p]] if labels[p] >= 0 else UNKNOWN for p in positions],
        )

    def as_dict(self) -> dict[str, list]:
        return dict(self.__dict__)


def text_key(text: str) -> str:
    """A text's key: the same text, the same key, in every run (a held-out text's request
    id, and an answer's key in the book)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def question_key(asked: Mapping[str, object], names: Sequence[str]) -> str:
    """The hash of what decides an answer besides the text: the chat model, the prompt, its
    limits, and the intents it may name (in the prompt and the schema's enum)."""
    body = json.dumps({**asked, "intents": list(names)}, sort_keys=True)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:32]


def cascade_plan(
    escalation: Escalation,
    held_out: HeldOutCascade,
    run_id: str = "cascade",
    ledger: BatchLedger | None = None,
) -> dict[str, object]:
    """The cascade's threshold (`cascade.choose_threshold`) on the held-out texts, each
    answered by the chat model; with the chat model's accuracy and cost there, for the
    record. Raises CascadePending while a provider has some of the answers."""
    settings = escalation.settings
    keys = [text_key(t) for t in held_out.texts]
    answers = escalation.answer(dict(zip(keys, held_out.texts, strict=True)), run_id, ledger)
    awaited = sum(a.awaiting for a in answers.values())
    if awaited:
        raise CascadePending(
            f"the chat model has not answered {awaited} of the {len(answers)} held-out texts "
            "yet (a provider's batch): the cascade's threshold is chosen once a run collects "
            "them; until then nothing escalates"
        )
    chat_right = [answers[k].intent == t for k, t in zip(keys, held_out.truth, strict=True)]
    plan = choose_threshold(
        held_out.confidence,
        held_out.head_right,
        chat_right,
        settings.target_accuracy,
        settings.delta,
    )
    asked = bool(keys)
    return {
        **plan.as_dict(),
        "chat_model": escalation.model_name if asked else None,
        "chat_accuracy": round(float(np.mean(chat_right)), 4) if asked else None,
        "chat_cost": sum(a.cost for a in answers.values()),
    }


@dataclass(frozen=True)
class DayCascade:
    """A generation's cascade as a day's land uses it: the chat model, and the plan its
    training chose (read when first needed: it is trained with the classifier)."""

    escalation: Escalation
    # the generation's CascadePlan, as its record keeps it (CascadePending: not chosen yet)
    plan: Callable[[], dict | None]
    prefix: str = ""  # the encoder's document prefix: not part of what the chat model reads
    run_id: str = "cascade"
    ledger: BatchLedger | None = None  # the day's, for a provider's batches

    @property
    def model_name(self) -> str:
        return self.escalation.model_name

    def escalate(
        self, inputs: list[tuple[str, str]], confidences: list[float]
    ) -> dict[str, ChatAnswer]:
        """The chat model's answers for the inputs (key, text) whose confidence is under the
        plan's threshold; none where the plan escalates nothing, and every input awaiting
        while the threshold is (its held-out answers are at a provider)."""
        try:
            plan = self.plan()
        except CascadePending as pending:
            return {key: ChatAnswer(None, 0.0, str(pending), awaiting=True) for key, _ in inputs}
        threshold = None if plan is None else plan.get("threshold")
        if threshold is None:
            return {}
        asked = {
            key: text.removeprefix(self.prefix)
            for (key, text), confidence in zip(inputs, confidences, strict=True)
            if confidence < threshold
        }
        return self.escalation.answer(asked, self.run_id, self.ledger)


def cascade_scores(
    escalation: Escalation,
    plan: dict,
    texts: list[str],
    confidences: list[float],
    predicted: list[str],
    labels: list[str],
    ledger: BatchLedger | None = None,
) -> dict[str, float]:
    """The cascade on the labelled set, as a day runs it: the tickets under the plan's
    threshold answered by the chat model. Its accuracy beside the target, the share
    escalated, and the chat model's cost per 1,000 tickets; none while a provider has some
    of the answers."""
    threshold = plan.get("threshold")
    final = list(predicted)
    cost = 0.0
    under = [] if threshold is None else [n for n, c in enumerate(confidences) if c < threshold]
    if under:
        answers = escalation.answer({text_key(texts[n]): texts[n] for n in under}, "review", ledger)
        if any(a.awaiting for a in answers.values()):
            return {}
        for n in under:
            answer = answers[text_key(texts[n])]
            final[n] = answer.intent if answer.intent is not None else final[n]
        cost = sum(a.cost for a in answers.values())
    right = sum(f == y for f, y in zip(final, labels, strict=True))
    count = max(1, len(labels))
    return {
        "cascade_accuracy": round(right / count, 4),
        "cascade_target": float(plan["target_accuracy"]),
        "cascade_escalated_share": round(len(under) / count, 4),
        "cascade_cost_per_1k": cost / count * 1000,
    }
