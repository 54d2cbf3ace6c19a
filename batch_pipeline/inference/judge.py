"""A chat model as a reranker: the yes/no judge of the score family.

The judge asks the chat model, for each (query, document) pair, whether the document answers
the question, and reads the answer's first token only: its score is P("yes") / (P("yes") +
P("no")) from the log-probabilities of that token (the top `TOP_LOGPROBS` alternatives,
greedy, one output token). Spellings fold together ("Yes", " yes", "YES" are one "yes").
Neither word among the alternatives scores 0.5: the model said nothing either way.

The same question runs on vLLM in the run's process (`VllmJudge`: `LLM.chat` with
`logprobs`) and through a batch file (`executors.batch_file.judge_request_line`, read back by
`judge_score_of`: `logprobs` with `top_logprobs` and `max_tokens: 1`, as a provider's Batch
API takes them), so the judge's scores are the same wherever it runs. A small chat model is
a poor judge (the shipped 135M one made the handbook's search much worse), which is why no
reranker reaches readers without passing a gate.
"""

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from batch_pipeline.inference.generator import Prompt
from batch_pipeline.inference.scorer import Pair, ScoreStats

JUDGE_VERSION = "judge-1"  # the prompt below: a change is another reranker generation
JUDGE_SYSTEM = "You judge whether a document answers a question. Reply with yes or no."
JUDGE_USER = (
    "Question: {query}\n\nDocument:\n{document}\n\n"
    "Does the document answer the question? Answer yes or no."
)
TOP_LOGPROBS = 20
DOCUMENT_TOKENS = 384  # a document is cut to this many tokens in the judge's prompt


def judge_prompt(key: str, query: str, document: str) -> Prompt:
    """The judge's question for one pair, under `key`."""
    return Prompt(key, JUDGE_SYSTEM, JUDGE_USER.format(query=query, document=document))


def judge_probability(alternatives: Iterable[tuple[str, float]]) -> float:
    """P(yes) / (P(yes) + P(no)) over the first token's alternatives, given as (token text,
    log-probability); 0.5 when neither word is among them. NaN where a log-probability is
    none (NaN, or above 0), for the engine's answer and a provider's alike: a score nobody
    measured, which the checkpoint refuses as its pair's failure (NaN read as "neither
    word" before, and scored 0.5)."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in alternatives:
        if math.isnan(logprob) or logprob > 0:
            return math.nan
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else 0.5


def judge_identity(model, document_tokens: int = DOCUMENT_TOKENS) -> dict[str, object]:  # noqa: ANN001 - a ChatModel
    """What decides a judge's scores: the chat model, the prompt and the document cut."""
    return {
        "judge": model.name,
        "files": model.fingerprint,
        "prompt": JUDGE_VERSION,
        "document_tokens": document_tokens,
    }


@dataclass(frozen=True)
class ResolvedJudge:
    """A chat model as the score family's model: the judge a score executor runs (the model
    `reranker: {model: judge}` names), with the document cut its prompts take."""

    model: object  # a ChatModel
    document_tokens: int = DOCUMENT_TOKENS

    @property
    def name(self) -> str:
        return self.model.name

    def identity(self) -> dict[str, object]:
        return judge_identity(self.model, self.document_tokens)


def judge_prompts(
    generator, pairs: Sequence[Pair], document_tokens: int, keys=None
) -> list[Prompt]:  # noqa: ANN001
    """The judge's question for each pair, its document cut to `document_tokens` of the chat
    model's tokens (`generator`'s tokenizer): the same wherever the judge runs. Keyed by
    `keys`, or by position."""
    keys = keys if keys is not None else [str(i) for i in range(len(pairs))]
    return [
        judge_prompt(key, query, generator.truncate(document, document_tokens)[0])
        for key, (query, document) in zip(keys, pairs, strict=True)
    ]


class VllmJudge:
    """The judge on a `VllmGenerator`'s engine in the run's process (see the module
    docstring); a `Scorer`."""

    backend = "vllm-judge"

    def __init__(self, generator, document_tokens: int = DOCUMENT_TOKENS) -> None:  # noqa: ANN001 - a VllmGenerator
        self.generator = generator
        self.device = generator.device
        self.document_tokens = document_tokens
        self.stats = ScoreStats()
        self.load_seconds = 0.0

    def identity(self) -> dict[str, object]:
        """What decides its scores (`judge_identity`)."""
        return judge_identity(self.generator.model, self.document_tokens)

    def score_batch(self, pairs: list[Pair]) -> np.ndarray:
        return self.score(pairs)

    def run(self, batches: Iterable[list[Pair]]) -> Iterator[np.ndarray]:
        for pairs in batches:
            yield self.score(pairs)

    def score(self, pairs: Sequence[Pair]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        from vllm import SamplingParams

        fresh = not self.generator.loaded
        llm = self.generator.engine()
        if fresh:
            self.load_seconds = self.generator.load_seconds
        prompts = judge_prompts(self.generator, pairs, self.document_tokens)
        params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS)
        started = time.perf_counter()
        outputs = llm.chat([p.messages() for p in prompts], params, use_tqdm=False)
        self.stats.seconds += time.perf_counter() - started
        scores = []
        for output in outputs:
            first = output.outputs[0].logprobs[0]  # the first token's alternatives
            alternatives = [(str(lp.decoded_token), float(lp.logprob)) for lp in first.values()]
            scores.append(judge_probability(alternatives))
            self.stats.tokens += len(output.prompt_token_ids or [])
        self.stats.pairs += len(pairs)
        self.stats.batches += 1
        return np.asarray(scores, dtype=np.float32)
