"""The yes/no judge's arithmetic and its batch-file form: P(yes) / (P(yes) + P(no)) over the
first token's alternatives, spellings folded; 0.5 when the model said neither; the request
asks one greedy token with its top log-probabilities, and the score reads back from a chat
completion's body as OpenAI writes `logprobs`."""

import math

import pytest

from batch_pipeline.executors.batch_file import (
    CHAT_COMPLETIONS,
    BatchFileError,
    judge_request_line,
    judge_score_of,
)
from batch_pipeline.inference.judge import TOP_LOGPROBS, judge_probability, judge_prompt


@pytest.mark.parametrize(
    ("alternatives", "expected"),
    [
        ([("Yes", math.log(0.6)), ("No", math.log(0.2))], 0.75),
        ([(" yes", math.log(0.3)), ("YES", math.log(0.3)), ("no", math.log(0.2))], 0.75),
        ([("no", math.log(0.9)), ("The", math.log(0.05))], 0.0),
        ([("Maybe", math.log(0.9))], 0.5),  # neither word: no opinion
        ([], 0.5),
    ],
)
def test_the_score_is_the_share_of_yes_among_yes_and_no(alternatives, expected):
    assert judge_probability(alternatives) == pytest.approx(expected)


@pytest.mark.parametrize("logprob", [math.nan, 0.5])
def test_a_log_probability_that_is_none_gives_no_score(logprob):
    """NaN (or a log-probability above 0) read as "neither word", a score of 0.5; it is
    NaN, which the checkpoint refuses as the pair's failure, on every executor."""
    assert math.isnan(judge_probability([("Yes", logprob), ("No", math.log(0.2))]))


def test_the_request_asks_one_greedy_token_and_the_answer_reads_back():
    prompt = judge_prompt("k1", "how do I reset my password", "Use the Forgot password link.")
    line = judge_request_line(prompt, "judge-model")
    assert line["custom_id"] == "k1" and line["url"] == CHAT_COMPLETIONS
    body = line["body"]
    assert (body["max_tokens"], body["temperature"], body["logprobs"]) == (1, 0.0, True)
    assert body["top_logprobs"] == TOP_LOGPROBS
    assert "how do I reset my password" in body["messages"][-1]["content"]
    answer = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "Yes"},
                "logprobs": {
                    "content": [
                        {
                            "token": "Yes",
                            "logprob": math.log(0.8),
                            "top_logprobs": [
                                {"token": "Yes", "logprob": math.log(0.8)},
                                {"token": "No", "logprob": math.log(0.2)},
                            ],
                        }
                    ]
                },
            }
        ]
    }
    assert judge_score_of(answer) == pytest.approx(0.8)
    with pytest.raises(BatchFileError, match="no log-probabilities"):
        judge_score_of({"choices": [{"message": {"content": "Yes"}, "logprobs": None}]})
