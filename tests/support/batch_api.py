"""A LOOPBACK EMULATOR of the OpenAI Batch API and of Anthropic's Message Batches API, for
tests: like moto for S3, it stands in for providers no test can reach, speaking each
published API to its official client (`openai`, `anthropic`), over one state and one set of
knobs, so one test body runs against either.

No server that installs from the package registries implements the Batch API (vLLM serves
chat completions and runs batch files offline, not `/v1/batches`), so this one does, on
127.0.0.1, with what a provider does that the executor must survive:

- chat completions and embeddings (`/v1/chat/completions`, `/v1/embeddings` lines), and a
  chat completion's first-token `logprobs` with its `top_logprobs` where a line asks (the
  yes/no judge's);
- `POST /v1/files` (multipart, `purpose=batch`), `GET /v1/files/{id}/content`;
- `POST /v1/batches`, `GET /v1/batches/{id}`, `GET /v1/batches` (newest first, `limit`),
  `POST /v1/batches/{id}/cancel`;
- the statuses `validating` -> `in_progress` -> `finalizing` -> `completed`, one step per
  poll (`polls_to_finish` polls in all), or `expired` when `expire_after` is set;
- separate output and error files, each in a shuffled order (a seeded shuffle: replayable);
- partial failures: `fail(custom_id)` returns a status code (500, 429, 400 ...) for a request
  the "model" does not answer; expiry writes `batch_expired` errors for the requests past
  `expire_after`;
- a Bearer key: any other gets a 401 whose message quotes the key's start and end, as
  OpenAI's does;
- a hostile provider's faults: `garble(custom_id)` cuts that request's answer line short
  (not JSON) and `junk_lines` adds lines that name no request (a gateway's HTML); a
  creation that answers 500 after the batch was made (`create_errors`, as a gateway timing
  out after its backend accepted); a batch or file deleted (`forget`), as past the
  provider's retention, answering 404; a file the provider refuses (`invalid`: the batch
  fails at once with those errors, each naming its line, and runs nothing), or some of its
  requests (`refuse(custom_id)`: a message for each one its validation refuses, and the
  batch fails at once with an error naming each one's line, as a provider's validation of
  an over-long or malformed request does).

Anthropic's Message Batches (`/v1/messages/batches`; the key as `x-api-key` or, as the
client sends it since 2026, a Bearer token), as its documentation
publishes them: a batch is created with its requests in the call (`{custom_id, params}`,
the system prompt as `system`, the schema as `output_config.format`); it is `in_progress`
until it `ended` (`cancel_initiated_at` set where it was cancelled); its `results_url` gives
one line per request in any order, `succeeded` (the message, its `stop_reason` and usage),
`errored` (`api_error` for `fail`'s 5xx, `rate_limit_error` for a 429,
`invalid_request_error` for a 4xx and for `refuse`'s requests: Anthropic validates each
request on its own), `expired` (past `expire_after`) or `canceled`; no metadata; `invalid`
refuses the whole creation with a 400, and `create_errors` answer 529 after making it.

The chat answers are the FAKE generator's (`inference.fake`): schema-valid JSON built from the
prompt's own words, so a brief can be checked against its document. The embeddings are
`embed`'s: a hashed bag of tokens unless a test gives it the real model. The first token's
alternatives are `judge`'s: "yes" as likely as the question's words are in the document,
unless a test gives it the real chat model.
"""

import email.parser
import email.policy
import itertools
import json
import math
import random
import re
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from batch_pipeline.inference.fake import FakeGenerator
from batch_pipeline.inference.generator import Prompt

FINISHED = ("completed", "expired", "failed", "cancelled")
STEPS = ("validating", "in_progress", "finalizing")


def overlap_judge(messages: list[dict]) -> list[tuple[str, float]]:
    """A yes/no answer's first-token alternatives, as (token, log-probability): "yes" as
    likely as the share of the question's longer words found in the document."""
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    question, _, document = user.partition("\n\nDocument:\n")
    words = {w for w in re.findall(r"[a-z]+", question.lower()) if len(w) > 3} - {"question"}
    found = set(re.findall(r"[a-z]+", document.lower()))
    share = len(words & found) / len(words) if words else 0.0
    yes = 0.05 + 0.9 * share
    return [("yes", math.log(yes)), ("no", math.log(1 - yes)), ("Maybe", math.log(0.001))]


def hashed_vector(given: list[int] | str, dimension: int = 384) -> list[float]:
    """A deterministic unit vector of an input's tokens (ids, or the words of a text)."""
    vector = [0.0] * dimension
    for token in given if isinstance(given, list) else given.split():
        vector[zlib.crc32(str(token).encode()) % dimension] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _chat_line(request: dict) -> dict:
    """A Message Batch request as the chat completion line the emulator answers."""
    params = request["params"]
    messages = list(params["messages"])
    if params.get("system"):
        messages.insert(0, {"role": "system", "content": params["system"]})
    body = {
        "model": params["model"],
        "messages": messages,
        "max_tokens": params["max_tokens"],
        "temperature": params.get("temperature", 1.0),
    }
    schema = ((params.get("output_config") or {}).get("format") or {}).get("schema")
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
    return {"custom_id": request["custom_id"], "url": "/v1/chat/completions", "body": body}


def _message_result(line: dict) -> dict:
    """An answer or error line of the OpenAI Batch API's files as a Message Batch result."""
    custom_id = line["custom_id"]
    error = line.get("error")
    if error and error.get("code") == "batch_expired":
        return {"custom_id": custom_id, "result": {"type": "expired"}}
    response = line.get("response") or {}
    status = response.get("status_code")
    if status != 200:
        kind = (
            "api_error"
            if status >= 500
            else "rate_limit_error"
            if status == 429
            else "invalid_request_error"
        )
        said = response["body"]["error"]["message"]
        failed = {"type": "error", "error": {"type": kind, "message": said}}
        return {"custom_id": custom_id, "result": {"type": "errored", "error": failed}}
    body = response["body"]
    choice = body["choices"][0]
    stop = {"stop": "end_turn", "length": "max_tokens"}[choice["finish_reason"]]
    message = {
        "id": body["id"].replace("chatcmpl", "msg"),
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": choice["message"]["content"]}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": body["usage"]["prompt_tokens"],
            "output_tokens": body["usage"]["completion_tokens"],
        },
    }
    return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}


def _cut(line: str, custom_id: str) -> str:
    """An answer line cut off a little after its custom_id: not JSON, though it names one."""
    return line[: line.index(custom_id) + len(custom_id) + 20]


@dataclass
class EmulatedBatch:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict
    created_at: int
    status: str = "validating"
    polls: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})
    errors: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)  # read from its input file when made
    wire: str = "openai"  # the API that made it: "openai" or "anthropic"
    refused: dict = field(default_factory=dict)  # anthropic: custom_id -> why it was refused
    cancelled_at: float | None = None

    def as_message_batch(self, base: str) -> dict:
        """The batch as Anthropic's API shows it."""
        ended = self.status in FINISHED
        answered = {"succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        answered.update(self.counts.get("anthropic", {}))
        processing = 0 if ended else len(self.requests)
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {"processing": processing, **answered},
            "created_at": _iso(self.created_at),
            "expires_at": _iso(self.created_at + 86400),
            "ended_at": _iso(time.time()) if ended else None,
            "archived_at": None,
            "cancel_initiated_at": _iso(self.cancelled_at or self.created_at)
            if self.status == "cancelled"
            else None,
            "results_url": f"{base}/v1/messages/batches/{self.id}/results" if ended else None,
        }

    def as_json(self) -> dict:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "request_counts": self.counts,
            "metadata": self.metadata,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
        }


class BatchApiEmulator:
    """The emulator's state and knobs (see the module docstring); `start()` serves it."""

    def __init__(self, api_key: str = "sk-emulator-0123456789abcdefghij", seed: int = 7) -> None:
        self.api_key = api_key
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, EmulatedBatch] = {}
        self.polls_to_finish = 3  # retrieve calls before a batch has its result files
        self.fail: Callable[[str], int | None] = lambda custom_id: None
        self.expire_after: int | None = None  # requests answered before the window ends
        self.hold = False  # True: batches stay in_progress (a provider's slow day)
        self.created: list[list[str]] = []  # each created batch's custom_ids, in order
        self.unauthorised = 0  # requests refused for their key
        self.garble: Callable[[str], bool] = lambda custom_id: False
        self.junk_lines: list[str] = []  # written into the next output file, then cleared
        self.create_errors = 0  # creations still to answer 500 after making the batch
        # the file's validation errors (`code`, `message`, `line`): a batch created while set
        # fails at once with them, as a provider that refuses the file does (nothing is run)
        self.invalid: list[dict] = []
        self.refuse: Callable[[str], str | None] = lambda custom_id: None
        # the "model" of `/v1/embeddings`: an input (token ids or text) to its vector; by
        # default a hashed bag of its tokens, 384 wide (a test gives the real model's)
        self.embed: Callable[[list[int] | str], list[float]] = hashed_vector
        # the judge's first token: a chat request's messages to its alternatives, as
        # (token, log-probability), likeliest first or not (a test gives the real model's)
        self.judge: Callable[[list[dict]], list[tuple[str, float]]] = overlap_judge
        self._ids = itertools.count(1)
        self._random = random.Random(seed)
        self._fake = FakeGenerator()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ serving

    def start(self) -> str:
        """Serve on a free loopback port; the base URL the client takes (`.../v1`)."""
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                emulator._handle(self, "GET")

            def do_POST(self) -> None:
                emulator._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"  # Anthropic's client's
        self.url = f"{self.base}/v1"  # the OpenAI client's
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def forget(self, object_id: str) -> None:
        """A batch or file the provider no longer has: asking for it is a 404."""
        self.batches.pop(object_id, None)
        self.files.pop(object_id, None)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        path = request.path.split("?", 1)[0]
        if path.startswith("/v1/messages/batches"):
            return self._handle_messages(request, method, path, body)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            self.unauthorised += 1
            given = (request.headers.get("Authorization") or "").removeprefix("Bearer ")
            quoted = f"{given[:3]}*****{given[-4:]}" if len(given) > 8 else given
            return self._send(
                request,
                401,
                {
                    "error": {
                        "message": f"Incorrect API key provided: {quoted}. You can find "
                        "your API key at https://platform.openai.com/account/api-keys.",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
        with self._lock:
            try:
                status, answer = self._route(method, path, request, body)
            except KeyError as error:
                status, answer = 404, {"error": {"message": f"no such object: {error}"}}
        if isinstance(answer, bytes):
            return self._send_bytes(request, status, answer)
        return self._send(request, status, answer)

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, value: dict) -> None:
        BatchApiEmulator._send_bytes(
            request, status, json.dumps(value).encode(), "application/json"
        )

    @staticmethod
    def _send_bytes(
        request: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        kind: str = "application/octet-stream",
    ) -> None:
        request.send_response(status)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def _route(
        self, method: str, path: str, request: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, dict | bytes]:
        if method == "POST" and path == "/v1/files":
            return 200, self._upload(request.headers.get("Content-Type", ""), body)
        if match := re.fullmatch(r"/v1/files/([^/]+)/content", path):
            return 200, self.files[match[1]]
        if method == "POST" and path == "/v1/batches":
            created = self._create(json.loads(body)).as_json()
            if self.create_errors:
                self.create_errors -= 1
                return 500, {"error": {"message": "upstream timed out", "type": "server_error"}}
            return 200, created
        if method == "GET" and path == "/v1/batches":
            newest = sorted(self.batches.values(), key=lambda b: b.id, reverse=True)
            data = [b.as_json() for b in newest]
            return 200, {"object": "list", "data": data, "has_more": False}
        if match := re.fullmatch(r"/v1/batches/([^/]+)/cancel", path):
            batch = self.batches[match[1]]
            batch.status = "cancelled"
            return 200, batch.as_json()
        if match := re.fullmatch(r"/v1/batches/([^/]+)", path):
            return 200, self._poll(self.batches[match[1]]).as_json()
        return 404, {"error": {"message": f"no route {method} {path}"}}

    def _handle_messages(
        self, request: BaseHTTPRequestHandler, method: str, path: str, body: bytes
    ) -> None:
        """Anthropic's Message Batches (see the module docstring)."""
        keys = {request.headers.get("x-api-key"), request.headers.get("Authorization")}
        if not keys & {self.api_key, f"Bearer {self.api_key}"}:
            self.unauthorised += 1
            refused = {"type": "authentication_error", "message": "invalid x-api-key"}
            return self._send(request, 401, {"type": "error", "error": refused})
        with self._lock:
            try:
                status, answer = self._route_messages(method, path, body)
            except KeyError as error:
                missing = {"type": "not_found_error", "message": f"no such object: {error}"}
                status, answer = 404, {"type": "error", "error": missing}
        if isinstance(answer, bytes):
            return self._send_bytes(request, status, answer, "application/binary")
        return self._send(request, status, answer)

    def _route_messages(self, method: str, path: str, body: bytes) -> tuple[int, dict | bytes]:
        if method == "POST" and path == "/v1/messages/batches":
            if self.invalid:
                said = "; ".join(e["message"] for e in self.invalid)
                refused = {"type": "invalid_request_error", "message": said}
                return 400, {"type": "error", "error": refused}
            batch = self._create_message_batch(json.loads(body)["requests"])
            if self.create_errors:
                self.create_errors -= 1
                overloaded = {"type": "overloaded_error", "message": "Overloaded"}
                return 529, {"type": "error", "error": overloaded}
            return 200, batch.as_message_batch(self.base)
        if method == "GET" and path == "/v1/messages/batches":
            mine = [b for b in self.batches.values() if b.wire == "anthropic"]
            newest = sorted(mine, key=lambda b: b.id, reverse=True)
            data = [b.as_message_batch(self.base) for b in newest]
            first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
            return 200, {"data": data, "has_more": False, "first_id": first, "last_id": last}
        if match := re.fullmatch(r"/v1/messages/batches/([^/]+)/cancel", path):
            batch = self.batches[match[1]]
            if batch.status not in FINISHED:
                batch.status, batch.cancelled_at = "cancelled", time.time()
                batch.counts["anthropic"] = {"canceled": len(batch.requests)}
            return 200, batch.as_message_batch(self.base)
        if match := re.fullmatch(r"/v1/messages/batches/([^/]+)/results", path):
            batch = self.batches[match[1]]
            if batch.status == "cancelled" and batch.output_file_id is None:
                lines = [
                    json.dumps({"custom_id": r["custom_id"], "result": {"type": "canceled"}})
                    for r in batch.requests
                ]
                return 200, "".join(line + "\n" for line in lines).encode()
            return 200, self.files[batch.output_file_id]
        if match := re.fullmatch(r"/v1/messages/batches/([^/]+)", path):
            return 200, self._poll(self.batches[match[1]]).as_message_batch(self.base)
        return 404, {"type": "error", "error": {"type": "not_found_error", "message": path}}

    def _create_message_batch(self, requests: list[dict]) -> EmulatedBatch:
        batch = EmulatedBatch(
            id=self._new_id("msgbatch"),
            input_file_id="",
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={},
            created_at=int(time.time()),
            wire="anthropic",
        )
        batch.requests = [_chat_line(r) for r in requests]
        batch.counts["total"] = len(requests)
        batch.refused = {
            r["custom_id"]: said
            for r in requests
            if (said := self.refuse(r["custom_id"])) is not None
        }
        self.created.append([r["custom_id"] for r in requests])
        self.batches[batch.id] = batch
        return batch

    # ------------------------------------------------------------- the API's work

    def _upload(self, content_type: str, body: bytes) -> dict:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        fields = {
            part.get_param("name", header="content-disposition"): part
            for part in message.iter_parts()
        }
        data = fields["file"].get_payload(decode=True)
        file_id = self._new_id("file")
        self.files[file_id] = data
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": fields["file"].get_filename(),
            "purpose": "batch",
        }

    def _create(self, asked: dict) -> EmulatedBatch:
        batch = EmulatedBatch(
            id=self._new_id("batch"),
            input_file_id=asked["input_file_id"],
            endpoint=asked["endpoint"],
            completion_window=asked["completion_window"],
            metadata=asked.get("metadata") or {},
            created_at=int(time.time()),
        )
        lines = batch.requests = self._requests(batch)
        batch.counts["total"] = len(lines)
        refused = [
            {"code": "invalid_request", "message": said, "line": n, "object": "error"}
            for n, line in enumerate(lines, start=1)
            if (said := self.refuse(line["custom_id"])) is not None
        ]
        if self.invalid or refused:
            errors = [dict(e, object="error") for e in self.invalid] + refused
            batch.status, batch.errors = "failed", errors
        self.created.append([line["custom_id"] for line in lines])
        self.batches[batch.id] = batch
        return batch

    def _requests(self, batch: EmulatedBatch) -> list[dict]:
        text = self.files[batch.input_file_id].decode()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _poll(self, batch: EmulatedBatch) -> EmulatedBatch:
        if batch.status in FINISHED or self.hold:
            return batch
        batch.polls += 1
        if batch.polls < self.polls_to_finish:
            batch.status = STEPS[min(batch.polls, len(STEPS) - 1)]
            return batch
        self._finish(batch)
        return batch

    def _finish(self, batch: EmulatedBatch) -> None:
        """Answer the batch's requests into an output and an error file, each shuffled."""
        requests = batch.requests
        outputs, errors = [], []
        for number, request in enumerate(requests):
            custom_id = request["custom_id"]
            line = {"id": self._new_id("batch_req"), "custom_id": custom_id}
            if self.expire_after is not None and number >= self.expire_after:
                errors.append(
                    line
                    | {
                        "response": None,
                        "error": {
                            "code": "batch_expired",
                            "message": "This request could not be executed before the completion "
                            "window expired.",
                        },
                    }
                )
                continue
            status = 400 if custom_id in batch.refused else self.fail(custom_id)
            if status is not None:
                errors.append(
                    line
                    | {
                        "error": None,
                        "response": {
                            "status_code": status,
                            "request_id": self._new_id("req"),
                            "body": {
                                "error": {
                                    "message": batch.refused.get(
                                        custom_id, f"emulated failure {status}"
                                    ),
                                    "type": "server_error"
                                    if status >= 500
                                    else "invalid_request_error",
                                }
                            },
                        },
                    }
                )
                continue
            outputs.append(
                line
                | {
                    "error": None,
                    "response": {
                        "status_code": 200,
                        "request_id": self._new_id("req"),
                        "body": self._answer(custom_id, request),
                    },
                }
            )
        for found in (outputs, errors):
            self._random.shuffle(found)
        if batch.wire == "anthropic":  # one results file: every request's line
            return self._finish_messages(batch, outputs + errors)
        if outputs:
            lines = [
                _cut(json.dumps(o), o["custom_id"])
                if self.garble(o["custom_id"])
                else json.dumps(o)
                for o in outputs
            ]
            lines += self.junk_lines
            self.junk_lines = []
            batch.output_file_id = self._new_id("file")
            self.files[batch.output_file_id] = "".join(line + "\n" for line in lines).encode()
        if errors:
            batch.error_file_id = self._new_id("file")
            self.files[batch.error_file_id] = "".join(json.dumps(e) + "\n" for e in errors).encode()
        batch.counts.update(completed=len(outputs), failed=len(errors))
        batch.status = "expired" if self.expire_after is not None else "completed"

    def _finish_messages(self, batch: EmulatedBatch, answered: list[dict]) -> None:
        results = [_message_result(line) for line in answered]
        self._random.shuffle(results)
        lines = [
            _cut(json.dumps(r), r["custom_id"])
            if self.garble(r["custom_id"]) and r["result"]["type"] == "succeeded"
            else json.dumps(r)
            for r in results
        ]
        lines += self.junk_lines
        self.junk_lines = []
        batch.output_file_id = self._new_id("file")
        self.files[batch.output_file_id] = "".join(line + "\n" for line in lines).encode()
        kinds = [r["result"]["type"] for r in results]
        batch.counts["anthropic"] = {k: kinds.count(k) for k in ("succeeded", "errored", "expired")}
        batch.status = "expired" if self.expire_after is not None else "completed"

    def _answer(self, custom_id: str, request: dict) -> dict:
        """The response body for one request, by the endpoint its line asks."""
        if request["url"] == "/v1/embeddings":
            return self._embedding(request["body"])
        return self._completion(custom_id, request["body"])

    def _embedding(self, body: dict) -> dict:
        """An embedding of the request's input (token ids or text) by `embed`."""
        given = body["input"]
        vector = [float(x) for x in self.embed(given)]
        tokens = len(given) if isinstance(given, list) else len(given.split())
        return {
            "object": "list",
            "model": body["model"],
            "data": [{"object": "embedding", "index": 0, "embedding": vector}],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _judged(self, body: dict) -> dict:
        """A one-token answer with its alternatives' log-probabilities (`judge`'s), the
        likeliest answered, `top_logprobs` of them listed."""
        alternatives = sorted(self.judge(body["messages"]), key=lambda pair: -pair[1])
        top = alternatives[: int(body.get("top_logprobs") or 1)]
        token, logprob = top[0]
        prompt = Prompt("judge", "", " ".join(m["content"] for m in body["messages"]))
        prompt_tokens = sum(self._fake.token_counts([prompt]))
        listed = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]
        return {
            "id": self._new_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": token},
                    "logprobs": {
                        "content": [
                            {
                                "token": token,
                                "logprob": logprob,
                                "bytes": list(token.encode()),
                                "top_logprobs": listed,
                            }
                        ]
                    },
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 1,
                "total_tokens": prompt_tokens + 1,
            },
        }

    def _completion(self, custom_id: str, body: dict) -> dict:
        """A chat completion the FAKE generator writes, held to the request's schema: the
        same as it writes in-process for that prompt (its key is the custom_id); a judge's
        question (`logprobs` asked) is `_judged`."""
        if body.get("logprobs"):
            return self._judged(body)
        messages = {m["role"]: m["content"] for m in body["messages"]}
        prompt = Prompt(custom_id, messages.get("system", ""), messages.get("user", ""))
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
        text = self._fake._answer(prompt, schema)
        prompt_tokens = sum(self._fake.token_counts([prompt]))
        output_tokens = len(self._fake._tokens(text))
        return {
            "id": self._new_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": output_tokens,
                "total_tokens": prompt_tokens + output_tokens,
            },
        }
