"""The generation benchmark's arithmetic: ratios against the baseline measured in the same
run, and how much of each output agrees with the baseline's."""

import pytest

from batch_pipeline.bench import embedding as bench
from batch_pipeline.bench import end_to_end as bench_end_to_end
from batch_pipeline.bench import generation as bench_generation
from batch_pipeline.bench.generation import _agreeing_share, summarise

PROMPTS = [{"ids": [1] * 10}, {"ids": [1] * 30}]


def result(seconds, outputs, texts, idle=None):
    return {
        "seconds": seconds,
        "output_tokens": outputs,
        "texts": texts,
        "idle_share": idle,
        "peak_rss_bytes": 2**30,
    }


def test_each_method_is_compared_with_static_8_from_the_same_run():
    rows = summarise(
        {
            "static-8": result(10.0, [5, 5], ["a b c", "d e"], idle=0.2),
            "vllm": result(2.5, [5, 5], ["a b c", "d x"]),
            "generate_batch": {"unavailable": "no generate_batch"},
        },
        PROMPTS,
    )
    by = {r["method"]: r for r in rows}
    assert by["static-8"]["x_baseline"] == 1.0 and by["vllm"]["x_baseline"] == 4.0
    assert by["vllm"]["output_tokens_per_second"] == 4.0
    assert by["vllm"]["total_tokens_per_second"] == 20.0  # (10 out + 40 prompt) / 2.5 s
    assert by["vllm"]["identical_to_baseline"] == 0.5
    assert by["vllm"]["agreeing_prefix_share"] == 0.75  # all of one, half of the other
    assert by["static-8"]["idle_share"] == 0.2 and by["static-8"]["peak_memory_mib"] == 1024
    assert by["generate_batch"] == {"method": "generate_batch", "unavailable": "no generate_batch"}


def test_the_agreeing_prefix_counts_words_before_the_first_difference():
    assert _agreeing_share("a b c d", "a b c d") == 1.0
    assert _agreeing_share("a b x d", "a b c d") == 0.5
    assert _agreeing_share("a b", "a b c d") == 0.5  # a shorter output agrees on less
    assert _agreeing_share("", "") == 1.0


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (bench.main, ["--rounds", "0"]),
        (bench_end_to_end.main, ["--copies", "-1"]),
        (bench_generation.main, ["--max-tokens", "0"]),
    ],
    ids=["bench", "bench_end_to_end", "bench_generation"],
)
def test_a_benchmark_refuses_a_count_below_one_before_it_loads_anything(main, argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    flag, value = argv
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a whole number of at least 1, not '{value}'" in err
