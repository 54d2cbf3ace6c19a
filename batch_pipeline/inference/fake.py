"""FAKE models for unit tests: deterministic vectors and texts, no model, no torch.

NOT A MODEL. `FakeEmbedder` hashes each lower-cased word of a text into a signed coordinate
(feature hashing) and L2-normalises the sum, so identical texts get identical vectors and
texts sharing words are close. It lets tests of planning, landing, generations and the
sensors run in milliseconds. Paths where the model matters (inference, evaluation scores,
drift across dtypes, search quality) are tested with the real model.

NOT A MODEL either. `FakeGenerator` answers a prompt with a JSON instance built from the
request's schema (strings from the prompt's own words, the first enum value, the fewest array
items the schema allows) or, with no schema, with the prompt's first words; an output longer
than `max_tokens` is cut and finishes with `length`. It honours `type`, `properties`,
`required`, `enum`, `minItems`/`maxItems` and `minLength`/`maxLength`, and nothing else, so
a schema asking more (a `pattern`, say) gets outputs that fail validation, as a model that
cannot satisfy its schema would.

NOT A MODEL, and it knows the answers: `LabelAnswering` answers a prompt whose user turn is a
labelled text with `{"intent": <its label>}` (`unknown` otherwise, or always with
`right=False`): the chat model that the ticket cascade's tests and its benchmark escalate to,
so that the guarantee's arithmetic has answers to choose a threshold from.
"""

import itertools
import json
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from batch_pipeline.config.taxonomy import UNKNOWN
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.embedder import PlannedBatch, RunStats
from batch_pipeline.inference.generator import Generation, GenerationStats, Prompt, Sampling
from batch_pipeline.inference.models import ResolvedModel

_WORDS = re.compile(r"\w+")
_TOKENS = re.compile(r"\w+|[^\w\s]")
TEMPLATE_TOKENS = 4  # what the fake counts for each chat message's markers


class FakeEmbedder:
    """A deterministic stand-in for `EmbeddingRunner` (see the module docstring)."""

    device = "fake"
    dtype = "float32"
    backend = "fake"
    calibrating = False  # nothing to choose

    def __init__(self, model: ResolvedModel) -> None:
        self.resolved = model
        self.dimension = model.embedding_dimension
        self.texts_embedded = 0  # what tests assert on: did anything reach the "model"?

    def vector(self, text: str) -> np.ndarray:
        out = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORDS.findall(text.lower()) or [""]:
            code = zlib.crc32(word.encode())
            out[code % self.dimension] += 1.0 if code & 1 << 31 else -1.0
        norm = float(np.linalg.norm(out))
        if norm == 0.0:
            out[0] = norm = 1.0
        return out / norm

    def calibrate(self, texts: list[str]) -> None:
        return None

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """NOT a tokenizer: a made-up id per word between two marker ids, cut to the limit."""
        limit = self.resolved.max_seq_length
        return [
            [1, *(zlib.crc32(w.encode()) % 30000 + 3 for w in _WORDS.findall(t))][: limit - 1] + [2]
            for t in texts
        ]

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.token_ids(texts)]

    def run(
        self, batches: Iterable[PlannedBatch], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        stats = stats if stats is not None else RunStats()
        for positions, texts, *_token_ids in batches:  # it reads words, not token ids
            started = time.perf_counter()
            vectors = np.stack([self.vector(t) for t in texts])
            counts = self.token_counts(texts)
            stats.inputs += len(texts)
            stats.tokens += sum(counts)
            stats.padded_tokens += len(texts) * max(counts)
            stats.batches += 1
            stats.seconds += time.perf_counter() - started
            self.texts_embedded += len(texts)
            yield positions, vectors

    def embed(self, texts: list[str], *_: object, **__: object) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        (_, vectors), *_ = list(self.run([(list(range(len(texts))), list(texts))]))
        return vectors


def fake_chat_model() -> ChatModel:
    """NOT A MODEL: the shape of SmolLM2-135M-Instruct, with no files behind it."""
    return ChatModel(
        name="FAKE-chat-model",
        path=Path("fake-chat-model"),
        files_hash="fake",
        hidden_size=576,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        max_position_embeddings=8192,
    )


class FakeGenerator:
    """A deterministic stand-in for `VllmGenerator` (see the module docstring)."""

    device = "fake"
    dtype = "float32"
    devices = 1

    def __init__(self, model: ChatModel | None = None) -> None:
        self.model = model or fake_chat_model()
        self.generated: list[str] = []  # prompt keys, in the order they reached the "model"

    @staticmethod
    def _tokens(text: str) -> list[str]:
        return _TOKENS.findall(text)

    def token_counts(self, prompts: list[Prompt]) -> list[int]:
        return [
            sum(len(self._tokens(m["content"])) + TEMPLATE_TOKENS for m in p.messages())
            for p in prompts
        ]

    def control_tokens(self) -> tuple[str, ...]:
        """The shipped model's (ChatML) turn markers, as a tokenizer would list them."""
        return ("<|im_start|>", "<|im_end|>", "<|endoftext|>")

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        tokens = self._tokens(text)
        if len(tokens) <= max_tokens:
            return text, False
        return _cut(text, sum(len(t) for t in tokens[:max_tokens])), True

    def _answer(self, prompt: Prompt, schema: dict | None) -> str:
        words = _WORDS.findall(prompt.user) or ["empty"]
        if schema is None:
            return "FAKE " + " ".join(words[:24])
        return json.dumps(_instance(schema, words, zlib.crc32(prompt.key.encode())))

    def generate(
        self,
        prompts: list[Prompt],
        sampling: Sampling,
        schema: dict | None = None,
        stats: GenerationStats | None = None,
        on_finished: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        started = time.perf_counter()
        out = []
        for prompt, prompt_tokens in zip(prompts, self.token_counts(prompts), strict=True):
            text = self._answer(prompt, schema)
            tokens = self._tokens(text)
            finish = "stop"
            limit = prompt.limit(sampling)
            if len(tokens) > limit:  # cut where the token after the last ends
                cut = sum(len(t) for t in tokens[:limit])
                text, finish, tokens = _cut(text, cut), "length", tokens[:limit]
            out.append(Generation(prompt.key, text, finish, prompt_tokens, len(tokens)))
            self.generated.append(prompt.key)
            if on_finished is not None:
                on_finished(1)
        if stats is not None:
            stats.add(
                GenerationStats(
                    requests=len(out),
                    prompt_tokens=sum(g.prompt_tokens for g in out),
                    output_tokens=sum(g.output_tokens for g in out),
                    seconds=time.perf_counter() - started,
                    calls=1,
                )
            )
        return out

    def stream(
        self,
        prompts: Iterable[Prompt],
        sampling: Sampling,
        schema: dict | None = None,
        stats: GenerationStats | None = None,
        window: int = 256,
    ) -> Iterator[Generation]:
        """`generate` over consecutive windows of `window` prompts, each output yielded as
        its window finishes (a subclass's `generate` faults and slow starts apply here)."""
        source = iter(prompts)
        while group := list(itertools.islice(source, max(1, window))):
            yield from self.generate(group, sampling, schema, stats)


def _cut(text: str, token_chars: int) -> str:
    """`text` up to where its first tokens, `token_chars` characters of them, end."""
    seen = 0
    for i, char in enumerate(text):
        if not char.isspace():
            seen += 1
        if seen >= token_chars:
            return text[: i + 1]
    return text


def _instance(schema: dict, words: list[str], salt: int) -> object:
    """A value for `schema` from `words` (see the module docstring)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: _instance(sub, words[i % len(words) :] + words, salt + i)
            for i, (name, sub) in enumerate(properties.items())
        }
    if kind == "array":
        items = schema.get("items", {"type": "string"})
        count = max(int(schema.get("minItems", 1)), 1)
        count = min(count, int(schema.get("maxItems", count)))
        return [_instance(items, words[i:] + words, salt + i) for i in range(count)]
    if kind == "string":
        text = " ".join(words[:12])
        limit = int(schema.get("maxLength", len(text)))
        text = text[:limit].rstrip()
        return text.ljust(int(schema.get("minLength", 0)), "x")
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return bool(salt & 1)
    return None


class LabelAnswering(FakeGenerator):
    """STAND-IN chat model that answers with the text's label (see the module docstring);
    `asked` lists the texts it was asked, in order."""

    def __init__(self, labels: dict[str, str], right: bool = True) -> None:
        super().__init__()
        self.labels = labels
        self.right = right
        self.asked: list[str] = []

    def _answer(self, prompt: Prompt, schema: dict | None) -> str:
        self.asked.append(prompt.user)
        label = self.labels.get(prompt.user, UNKNOWN) if self.right else UNKNOWN
        return json.dumps({"intent": label})
