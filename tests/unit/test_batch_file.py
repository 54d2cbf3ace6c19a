"""The OpenAI batch file, the boundary between a plan and what runs it: the
requests split at the format's limits, and the results joined by custom_id in any order,
failures inline or in an error file, a request with no line left without a result."""

import json
import random

import numpy as np
import pytest

from batch_pipeline.executors.batch_file import (
    CHAT_COMPLETIONS,
    EMBEDDINGS,
    SCORE,
    BatchFileError,
    embedding_request_line,
    read_results,
    request_line,
    score_request_line,
    write_request_files,
)
from batch_pipeline.inference.generator import Prompt, Sampling

SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}}


def prompts(count: int) -> list[Prompt]:
    return [
        Prompt(f"key-{i:03d}", "You write briefs.", f"Document {i}: " + "x" * i)
        for i in range(count)
    ]


def test_a_request_is_the_openai_chat_completion_request_of_its_prompt():
    line = request_line(prompts(1)[0], "smollm2", Sampling(max_tokens=64), SCHEMA)
    assert line["custom_id"] == "key-000" and line["method"] == "POST"
    assert line["url"] == CHAT_COMPLETIONS == "/v1/chat/completions"
    body = line["body"]
    assert body["model"] == "smollm2" and body["max_tokens"] == 64 and body["temperature"] == 0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert "seed" not in body and "repetition_penalty" not in body  # only when they matter
    free = request_line(prompts(1)[0], "m", Sampling(repetition_penalty=1.2), None)["body"]
    assert "response_format" not in free and free["repetition_penalty"] == 1.2


def test_the_requests_are_split_at_the_limits_and_each_is_written_once(tmp_path):
    files = write_request_files(prompts(25), tmp_path, "m", Sampling(), SCHEMA, max_requests=10)
    assert [f.name for f in files] == [f"requests-0000{i}.jsonl" for i in range(3)]
    keys = [json.loads(line)["custom_id"] for f in files for line in f.read_text().splitlines()]
    assert keys == [p.key for p in prompts(25)]
    assert [len(f.read_text().splitlines()) for f in files] == [10, 10, 5]
    one = len(json.dumps(request_line(prompts(25)[-1], "m", Sampling(), SCHEMA))) + 1
    by_size = write_request_files(
        prompts(25), tmp_path / "b", "m", Sampling(), SCHEMA, max_bytes=3 * one
    )
    assert all(f.stat().st_size <= 3 * one for f in by_size) and len(by_size) >= 9
    with pytest.raises(
        BatchFileError, match="request key-000 is 420 bytes, over a batch file.s 100"
    ):
        write_request_files(prompts(25), tmp_path / "c", "m", Sampling(), SCHEMA, max_bytes=100)


def output(key: str, text: str, finish: str = "stop") -> dict:
    body = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5},
    }
    return {
        "id": f"batch_req_{key}",
        "custom_id": key,
        "error": None,
        "response": {"status_code": 200, "request_id": "r", "body": body},
    }


def test_results_join_by_custom_id_in_any_order_with_failures_where_each_engine_puts_them(
    tmp_path,
):
    lines = [output(f"key-{i:03d}", f'{{"summary": "doc {i}"}}') for i in range(6)]
    inline = {
        "id": "x",
        "custom_id": "key-006",
        "error": None,  # vLLM run-batch: inline
        "response": {
            "status_code": 400,
            "request_id": "r",
            "body": {"error": {"code": "context_length_exceeded", "message": "too long"}},
        },
    }
    random.Random(7).shuffle(lines)
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [*lines, inline]))
    errors = {
        "id": "y",
        "custom_id": "key-007",
        "response": None,  # a provider: its own file
        "error": {"code": "batch_expired", "message": "not run in time"},
    }
    (tmp_path / "err.jsonl").write_text(json.dumps(errors) + "\n")

    results = read_results([tmp_path / "out.jsonl"], [tmp_path / "err.jsonl"])
    assert sorted(results) == [f"key-{i:03d}" for i in range(8)]  # key-008: no line, no result
    assert results["key-003"].text == '{"summary": "doc 3"}'
    assert results["key-003"].finish_reason == "stop" and results["key-003"].output_tokens == 5
    assert results["key-006"].text is None
    assert results["key-006"].error == "status 400; context_length_exceeded: too long"
    assert results["key-007"].error == "batch_expired: not run in time"
    again = read_results([tmp_path / "out.jsonl"], [tmp_path / "err.jsonl"])
    assert again == results  # landing the same files twice changes nothing

    # a resubmission that succeeded beats the error it answers, whichever file is read first
    retried = tmp_path / "retry.jsonl"
    retried.write_text(json.dumps(output("key-007", '{"summary": "late"}')) + "\n")
    both = read_results([tmp_path / "out.jsonl", retried], [tmp_path / "err.jsonl"])
    assert both["key-007"].error is None and both["key-007"].text == '{"summary": "late"}'


def test_a_broken_line_names_its_file_and_line(tmp_path):
    (tmp_path / "out.jsonl").write_text(json.dumps(output("a", "{}")) + "\n{not json\n")
    with pytest.raises(BatchFileError, match=r"out.jsonl line 2: not JSON"):
        read_results([tmp_path / "out.jsonl"])
    (tmp_path / "out.jsonl").write_text('{"response": {}}\n')
    with pytest.raises(BatchFileError, match=r"out.jsonl line 1: no custom_id"):
        read_results([tmp_path / "out.jsonl"])


def test_an_embedding_request_carries_the_plans_token_ids_and_its_result_a_vector(tmp_path):
    line = embedding_request_line("7", [101, 2129, 102], "all-MiniLM-L6-v2", normalize=True)
    assert line == {
        "custom_id": "7",
        "method": "POST",
        "url": EMBEDDINGS,
        "body": {"model": "all-MiniLM-L6-v2", "input": [101, 2129, 102]},
    }
    raw = embedding_request_line("7", [101], "m", normalize=False)["body"]
    assert raw["use_activation"] is False  # vLLM's extension: sent only when it matters

    body = {
        "object": "list",
        "data": [{"index": 0, "object": "embedding", "embedding": [0.6, 0.8]}],
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
    ok = {"custom_id": "7", "response": {"status_code": 200, "body": body}}
    refused = {
        "custom_id": "8",
        "response": {
            "status_code": 400,
            "body": {"error": {"code": "too_long", "message": "over the model's length"}},
        },
    }
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (ok, refused)))
    results = read_results([tmp_path / "out.jsonl"])
    assert results["7"].vector.dtype == np.float32
    assert results["7"].vector.tolist() == pytest.approx([0.6, 0.8])
    assert results["7"].error is None and results["7"].prompt_tokens == 3
    assert results["8"].vector is None and not results["8"].retryable
    assert results["8"].error == "status 400; too_long: over the model's length"


def test_a_score_line_asks_a_query_s_documents_and_its_scores_read_back_in_order(tmp_path):
    line = score_request_line("0:0", "reset password", ["doc a", "doc b"], "xenc", 500)
    assert line["url"] == SCORE and line["custom_id"] == "0:0"
    assert line["body"] == {
        "model": "xenc",
        "queries": "reset password",
        "documents": ["doc a", "doc b"],
        "max_tokens_per_doc": 500,
    }
    answered = {
        "custom_id": "0:0",
        "response": {
            "status_code": 200,
            "body": {
                "object": "list",
                "data": [  # any order: read back by index
                    {"index": 1, "object": "score", "score": 0.25},
                    {"index": 0, "object": "score", "score": 0.75},
                ],
                "usage": {"prompt_tokens": 12},
            },
        },
    }
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(answered) + "\n")
    (result,) = read_results([results]).values()
    assert result.scores == (0.75, 0.25) and result.error is None and result.prompt_tokens == 12


def test_the_format_s_limits_hold_at_their_real_sizes_read_in_the_smaller_unit(tmp_path):
    """50,000 requests a file, and 200 MB as 200,000,000 bytes: a provider counting decimal
    megabytes refused what 200 MiB let through (before, the limit was 209,715,200 bytes)."""
    many = write_request_files(
        (Prompt(f"k{i}", "s", "u") for i in range(120_001)), tmp_path / "n", "m", Sampling(), None
    )
    counts = [sum(1 for _ in f.open("rb")) for f in many]
    assert counts == [50_000, 50_000, 20_001]
    big = (Prompt(f"big-{i}", "s", "x" * 67_000_000) for i in range(4))  # 67 MB a request
    files = write_request_files(big, tmp_path / "b", "m", Sampling(), None)
    # three of them (201 MB) fit 200 MiB but not 200 MB
    assert [sum(1 for _ in f.open("rb")) for f in files] == [2, 2]
    assert max(f.stat().st_size for f in files) <= 200_000_000


def test_a_document_s_newlines_and_control_characters_stay_inside_its_request_and_answer(
    tmp_path,
):
    text = "".join(chr(c) for c in range(32)) + "\x7f\x85 A\u2028B\u2029C\ufeffD\r\nE\n"
    (path,) = write_request_files([Prompt("doc", "sys", text)], tmp_path, "m", Sampling(), None)
    raw = path.read_bytes()
    assert raw.count(b"\n") == 1 and raw.endswith(b"\n") and raw.isascii()
    assert json.loads(raw)["body"]["messages"][1]["content"] == text
    # an engine that writes the answer's text raw (UTF-8, as vLLM's pydantic does) is read whole
    answer = output("doc", text)
    (tmp_path / "out.jsonl").write_text(
        json.dumps(answer, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    assert read_results([tmp_path / "out.jsonl"])["doc"].text == text
