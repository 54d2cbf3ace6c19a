"""The OpenAI batch file: the boundary between a plan and whatever runs it, for every model
family.

One request per line (`custom_id`, `method`, `url`, `body`), as OpenAI's Batch API, vLLM's
`run-batch` and Ray Data LLM all read it:

- `custom_id` is the input's key in the plan (a prompt's staleness key, an embedding input's
  position in the run);
- `url` is `/v1/chat/completions` for a chat model: `body` holds the messages, the model,
  `max_tokens`, the temperature (0: greedy) and, with an output schema, `response_format` =
  that JSON schema (strict);
- `url` is `/v1/embeddings` for an embedding model: `body` holds the model and the input's
  token ids, as the plan cut them;
- `url` is `/score` for a reranker (vLLM's): `body` holds the model, a query and its
  documents, and the answer one score per document;
- the yes/no judge (`inference.judge`) is a chat completion of one greedy token with its
  `top_logprobs`, its score read back from them (`judge_score_of`).

`write_request_files` splits the requests at the format's limits (50,000 requests or 200 MB a
file, as 200,000,000 bytes). A line is JSON with control characters and all past ASCII
escaped, so a document's newlines, control characters and Unicode line separators stay inside
its line; an answer line is split at a newline only, so an engine that writes U+2028 or U+0085
raw is read whole. `read_results` reads the output files and the error files an engine wrote
back, in any order, and joins them by `custom_id`: a line whose response is not a 200, or that
carries an `error`, is that request's failure (vLLM's `run-batch` writes its failures inline,
a provider into a separate error file); a request with no line at all has no result, and is
planned again by the next run. A failure that says nothing of the request itself (expired,
throttled, a 5xx) is `retryable`; a 4xx refusal is the request's own. Reading the same files
twice gives the same results.
"""

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batch_pipeline.inference.generator import Prompt, Sampling
from batch_pipeline.inference.judge import TOP_LOGPROBS, judge_probability

CHAT_COMPLETIONS = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
SCORE = "/score"  # vLLM's: a query's documents scored by a pooling model (a reranker)
MAX_REQUESTS = 50_000  # a batch file's limit, in requests
# and in bytes: "200 MB" read as 200,000,000, the smaller reading, so no provider that counts
# in decimal megabytes refuses a file of 200 MiB
MAX_BYTES = 200_000_000
SCHEMA_NAME = "output"


class BatchFileError(ValueError):
    """A line of a batch file that is not what the format says; the message names it."""


def request_line(prompt: Prompt, model: str, sampling: Sampling, schema: dict | None) -> dict:
    """One request of the batch file, for `prompt` on `model` (see the module docstring).
    `repetition_penalty` other than 1 is vLLM's extension of the request and is sent only
    then; a provider that does not know it refuses the request, as that request's error."""
    body: dict[str, object] = {
        "model": model,
        "messages": prompt.messages(),
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
    }
    if sampling.temperature > 0:
        body["seed"] = sampling.seed
    if sampling.repetition_penalty != 1.0:
        body["repetition_penalty"] = sampling.repetition_penalty
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True},
        }
    return {"custom_id": prompt.key, "method": "POST", "url": CHAT_COMPLETIONS, "body": body}


def embedding_request_line(
    key: str, given: Sequence[int] | str, model: str, normalize: bool
) -> dict:
    """One embedding request of the batch file: the input as the plan's token ids (or as
    text, for a model whose tokenizer is not the plan's). Not normalising is vLLM's
    extension of the request (`use_activation`), sent only then."""
    body: dict[str, object] = {
        "model": model,
        "input": given if isinstance(given, str) else list(given),
    }
    if not normalize:
        body["use_activation"] = False
    return {"custom_id": key, "method": "POST", "url": EMBEDDINGS, "body": body}


def score_request_line(
    key: str, query: str, documents: list[str], model: str, document_tokens: int
) -> dict:
    """One score request of the batch file: a query and its documents (vLLM's `/score`),
    each document cut to `document_tokens` tokens, as the in-process scorer cuts a pair."""
    body = {
        "model": model,
        "queries": query,
        "documents": documents,
        "max_tokens_per_doc": document_tokens,
    }
    return {"custom_id": key, "method": "POST", "url": SCORE, "body": body}


def judge_request_line(prompt: Prompt, model: str) -> dict:
    """The yes/no judge's question (`inference.judge`) as a chat completion: greedy, one
    output token, with the top alternatives' log-probabilities."""
    body = {
        "model": model,
        "messages": prompt.messages(),
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
    }
    return {"custom_id": prompt.key, "method": "POST", "url": CHAT_COMPLETIONS, "body": body}


def judge_score_of(body: dict) -> float:
    """The judge's score from a chat completion's response body (an output line's
    `response.body`); a BatchFileError when it carries no log-probabilities."""
    try:
        first = body["choices"][0]["logprobs"]["content"][0]
        alternatives = [(t["token"], float(t["logprob"])) for t in first["top_logprobs"]]
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise BatchFileError(f"the judge's answer has no log-probabilities ({error!r})") from None
    return judge_probability(alternatives)


def write_request_files(
    prompts: Iterable[Prompt],
    folder: Path,
    model: str,
    sampling: Sampling,
    schema: dict | None,
    max_requests: int = MAX_REQUESTS,
    max_bytes: int = MAX_BYTES,
) -> list[Path]:
    """The prompts as batch files (`write_batch_files`)."""
    requests = (request_line(prompt, model, sampling, schema) for prompt in prompts)
    return write_batch_files(requests, folder, max_requests, max_bytes)


def write_batch_files(
    requests: Iterable[dict],
    folder: Path,
    max_requests: int = MAX_REQUESTS,
    max_bytes: int = MAX_BYTES,
) -> list[Path]:
    """Request lines as batch files `requests-00000.jsonl`, ... in `folder`, each within
    `max_requests` lines and `max_bytes` bytes; streamed: memory holds one line. A single
    request larger than `max_bytes` is a BatchFileError naming it."""
    folder.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    out = None
    lines = size = 0
    try:
        for request in requests:
            line = (json.dumps(request) + "\n").encode()
            if len(line) > max_bytes:
                raise BatchFileError(
                    f"request {request['custom_id']} is {len(line):,} bytes, over a batch "
                    f"file's {max_bytes:,}"
                )
            if out is None or lines >= max_requests or size + len(line) > max_bytes:
                if out is not None:
                    out.close()
                files.append(folder / f"requests-{len(files):05d}.jsonl")
                out = files[-1].open("wb")
                lines = size = 0
            out.write(line)
            lines, size = lines + 1, size + len(line)
    finally:
        if out is not None:
            out.close()
    return files


@dataclass(frozen=True)
class BatchResult:
    """What came back for one request: its output, or why there is none."""

    key: str  # the request's custom_id
    text: str | None  # the message's content; None when the request failed or embedded
    finish_reason: str | None
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None  # why the request failed (status code, code, message)
    # a failure that says nothing of the request (expired, throttled, the server's own
    # trouble): worth sending again, where a 4xx refusal is the request's own failure
    retryable: bool = False
    vector: np.ndarray | None = None  # an embedding request's vector (float32)
    # a score request's, one per document in order; the judge's answer's, one
    scores: tuple[float, ...] | None = None


CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"((?:[^"\\]|\\.){1,256})"')


def read_lines(path: Path, unreadable: list[str] | None = None) -> Iterator[tuple[int, dict]]:
    """Each answer line of a results file. A line that is not JSON, or names no request, is
    a BatchFileError; with `unreadable`, it is noted there instead, and where the line still
    shows a custom_id, yielded as that request's failure (the rest of the file still reads)."""
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
                problem = None
            except ValueError as error:
                value, problem = None, f"{path.name} line {number}: not JSON ({error})"
            if problem is None and (
                not isinstance(value, dict) or not isinstance(value.get("custom_id"), str)
            ):
                problem = f"{path.name} line {number}: no custom_id"
            if problem is None:
                yield number, value
                continue
            if unreadable is None:
                raise BatchFileError(problem)
            unreadable.append(problem)
            named = CUSTOM_ID.search(line)
            if named:
                error = {"code": "unreadable_answer", "message": problem}
                yield number, {"custom_id": named.group(1), "error": error, "final": True}


def _error_text(status: object, error: object, body: object) -> str:
    """A failed request's reason, from whatever the engine said of it."""
    detail = error if error else (body or {}).get("error") if isinstance(body, dict) else body
    if isinstance(detail, dict):
        code, message = detail.get("code") or detail.get("type"), detail.get("message")
        detail = ": ".join(str(part) for part in (code, message) if part)
    status_text = f"status {status}" if status not in (None, 200) else None
    return "; ".join(str(part) for part in (status_text, detail) if part) or "failed"


def result_of(line: dict) -> BatchResult:
    """One output or error line as a result (see the module docstring)."""
    key = line["custom_id"]
    response = line.get("response") or {}
    status = response.get("status_code")
    body = response.get("body")
    if line.get("error") or status != 200 or not isinstance(body, dict):
        error = _error_text(status, line.get("error"), body)
        retryable = not line.get("final") and (
            status is None or status == 429 or (isinstance(status, int) and status >= 500)
        )
        return BatchResult(key, None, None, error=error, retryable=retryable)
    try:
        usage = body.get("usage") or {}
        if "data" in body and body["data"] and "score" in body["data"][0]:  # pairs' scores
            ordered = sorted(body["data"], key=lambda item: int(item["index"]))
            tokens = int(usage.get("prompt_tokens") or 0)
            scores = tuple(float(item["score"]) for item in ordered)
            return BatchResult(key, None, "stop", tokens, 0, scores=scores)
        if "data" in body:  # an embedding
            vector = body["data"][0]["embedding"]
            if not isinstance(vector, list):
                raise TypeError(f"embedding is {type(vector).__name__}, not a list of floats")
            with np.errstate(over="ignore"):  # 1e300 is inf: refused before any checkpoint
                vector = np.asarray(vector, dtype=np.float32)  # a quarter of a list's memory
            tokens = int(usage.get("prompt_tokens") or 0)
            return BatchResult(key, None, "stop", tokens, 0, vector=vector)
        choice = body["choices"][0]
        # the judge's answer carries its first token's alternatives: its score
        judged = (judge_score_of(body),) if choice.get("logprobs") else None
        return BatchResult(
            key,
            choice["message"]["content"] or "",
            choice.get("finish_reason"),
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            scores=judged,
        )
    except (KeyError, IndexError, TypeError, ValueError, BatchFileError) as error:
        return BatchResult(key, None, None, error=f"malformed response ({error!r})")


def read_results(
    output_files: Iterable[Path],
    error_files: Iterable[Path] = (),
    unreadable: list[str] | None = None,
) -> dict[str, BatchResult]:
    """Every request's result, by `custom_id`, from the files an engine wrote, in any order.
    An output beats an error for the same request (a resubmission that succeeded); of two
    outputs, the first read stands. With `unreadable`, a line that cannot be read is noted
    there and is its request's failure where it names one (`read_lines`), not the file's."""
    results: dict[str, BatchResult] = {}
    for path in (*output_files, *error_files):
        for _number, line in read_lines(Path(path), unreadable):
            result = result_of(line)
            known = results.get(result.key)
            if known is None or (known.error is not None and result.error is None):
                results[result.key] = result
    return results
