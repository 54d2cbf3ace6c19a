"""Chat-model generation without a model: the FAKE generator, output checks, the prompt plan
(token counts, refusals, KV estimates, chunks), execute's failures and its resume from
checkpoints, and how `dtype: auto` is decided."""

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batch_pipeline.inference import vllm_generator
from batch_pipeline.inference.fake import FakeGenerator, fake_chat_model
from batch_pipeline.inference.generator import (
    GenerationStats,
    Prompt,
    Sampling,
    check_output,
)
from batch_pipeline.inference.vllm_generator import pick_generation_dtype
from batch_pipeline.stages.generate import execute_prompts
from batch_pipeline.stages.prompt_plan import (
    PromptPlanSettings,
    plan_prompts,
    plan_record,
    prepared_prompts_schema,
)
from batch_pipeline.state.staging import read_table, stage_summary

SCHEMA = {
    "type": "object",
    "required": ["summary", "audience", "questions"],
    "properties": {
        "summary": {"type": "string", "maxLength": 80},
        "audience": {"enum": ["members", "admins"]},
        "questions": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3},
    },
}
SYSTEM = "Write a brief of the article in JSON."


def write_prompts(path, texts):
    rows = [{"input_hash": f"h{i:03d}", "system": SYSTEM, "user": t} for i, t in enumerate(texts)]
    pq.write_table(pa.Table.from_pylist(rows, schema=prepared_prompts_schema()), path)
    return path


def texts(n, words=20):
    return [" ".join(f"word{i}x{j}" for j in range(words)) for i in range(n)]


def test_the_fake_generator_answers_in_the_schema_deterministically():
    fake = FakeGenerator()
    prompt = Prompt("k", SYSTEM, "How do I reset my password on the VPN portal?")
    (first,) = fake.generate([prompt], Sampling(max_tokens=200), SCHEMA)
    (again,) = FakeGenerator().generate([prompt], Sampling(max_tokens=200), SCHEMA)
    assert first == again
    checked = check_output(first.text, first.finish_reason, SCHEMA)
    assert checked.valid, checked.reason
    assert len(checked.value["questions"]) == 3
    assert checked.value["audience"] == "members"
    assert fake.generated == ["k"]


def test_an_output_cut_at_max_tokens_is_a_failure_that_says_so():
    (cut,) = FakeGenerator().generate([Prompt("k", "", "a b c d e f")], Sampling(4), SCHEMA)
    assert cut.finish_reason == "length" and cut.output_tokens == 4
    checked = check_output(cut.text, cut.finish_reason, SCHEMA)
    assert not checked.valid and "finish_reason=length" in checked.reason


def test_check_output_names_what_is_wrong():
    assert "not JSON" in check_output("{oops", "stop", SCHEMA).reason
    wrong = check_output(
        '{"summary": "s", "audience": "robots", "questions": []}', "stop", SCHEMA
    ).reason
    assert "schema" in wrong and ("audience" in wrong or "questions" in wrong)
    assert check_output("plain text", "stop", None).valid
    assert not check_output("x", "abort", None).valid


def test_the_plan_counts_tokens_refuses_what_does_not_fit_and_sizes_the_kv_cache(tmp_path):
    fake = FakeGenerator()
    model = fake.model
    prepared = write_prompts(tmp_path / "prepared.parquet", [*texts(9, 20), "long " * 500])
    settings = PromptPlanSettings(
        max_model_len=256, max_num_seqs=2, chunk_size=4, kv_cache_bytes=1 << 30, dtype_bytes=2
    )
    summary = plan_prompts(prepared, tmp_path / "plan.parquet", fake, Sampling(64), settings)
    plan = read_table(tmp_path / "plan.parquet").to_pylist()
    counted = fake.token_counts([Prompt("x", SYSTEM, texts(1, 20)[0])])[0]
    assert [r["prompt_tokens"] for r in plan] == [counted] * 9
    assert [r["chunk_index"] for r in plan] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert summary.chunks == 3 and summary.prompts == 9
    (why,) = summary.refused.values()  # 500 words + the template do not fit 256 - 64
    assert "exceeds max_model_len 256" in why and "max_tokens 64" in why
    per_token = 30 * 3 * 64 * 2 * 2  # layers x KV heads x head dim x (K, V) x bf16 bytes
    assert model.kv_bytes_per_token(2) == per_token
    assert plan[0]["kv_bytes"] == (counted + 64) * per_token
    assert summary.peak_kv_bytes == 2 * (counted + 64) * per_token  # max_num_seqs at once
    assert summary.peak_kv_share == pytest.approx(summary.peak_kv_bytes / (1 << 30))
    assert plan_record(tmp_path / "plan.parquet").refused == summary.refused
    assert summary.metadata()["prompts_refused"] == 1


def test_execute_keeps_invalid_outputs_as_failures_with_their_reason(tmp_path):
    prepared = write_prompts(tmp_path / "prepared.parquet", texts(5))
    fake = FakeGenerator()
    plan_prompts(prepared, tmp_path / "plan.parquet", fake, Sampling(40), PromptPlanSettings())
    summary = execute_prompts(
        tmp_path / "plan.parquet", tmp_path / "out.parquet", lambda: fake, Sampling(40), SCHEMA
    )
    rows = read_table(tmp_path / "out.parquet").to_pylist()
    assert len(rows) == 5 and not any(r["valid"] for r in rows)  # 40 tokens cut the JSON
    assert all(r["finish_reason"] == "length" for r in rows)
    assert set(summary.failed_inputs) == {r["input_hash"] for r in rows}
    assert summary.valid_share == 0.0
    assert stage_summary(tmp_path / "out.parquet")["outputs_valid"] == 0


def test_a_schema_the_generator_cannot_satisfy_gives_no_valid_output(tmp_path):
    strict = {
        **SCHEMA,
        "properties": {
            **SCHEMA["properties"],
            "summary": {"type": "string", "pattern": "^[0-9]+$"},
        },
    }
    prepared = write_prompts(tmp_path / "prepared.parquet", texts(3))
    fake = FakeGenerator()
    plan_prompts(prepared, tmp_path / "plan.parquet", fake, Sampling(), PromptPlanSettings())
    summary = execute_prompts(
        tmp_path / "plan.parquet", tmp_path / "out.parquet", lambda: fake, Sampling(), strict
    )
    assert summary.valid_share == 0.0
    assert all("summary" in reason for reason in summary.failed_inputs.values())


class CrashingGenerator(FakeGenerator):
    """FAKE fault: dies while generating its `crash_on`-th chunk."""

    def __init__(self, crash_on: int) -> None:
        super().__init__()
        self.calls, self.crash_on = 0, crash_on

    def generate(self, prompts, sampling, schema=None, stats=None, on_finished=None):
        self.calls += 1
        if self.calls == self.crash_on:
            raise RuntimeError("engine died")
        return super().generate(prompts, sampling, schema, stats, on_finished)


def test_a_crash_resumes_without_regenerating_finished_chunks(tmp_path):
    prepared = write_prompts(tmp_path / "prepared.parquet", texts(10))
    plan = tmp_path / "plan.parquet"
    plan_prompts(prepared, plan, FakeGenerator(), Sampling(), PromptPlanSettings(chunk_size=3))
    checkpoints = tmp_path / "checkpoints"
    crashing = CrashingGenerator(crash_on=3)
    with pytest.raises(RuntimeError, match="engine died"):
        execute_prompts(
            plan,
            tmp_path / "out.parquet",
            lambda: crashing,
            Sampling(),
            SCHEMA,
            checkpoint_dir=checkpoints,
        )
    assert len(crashing.generated) == 6  # two chunks of three finished before the crash
    assert not (tmp_path / "out.parquet").exists()  # no half output
    retry, updates = FakeGenerator(), []
    summary = execute_prompts(
        plan,
        tmp_path / "out.parquet",
        lambda: retry,
        Sampling(),
        SCHEMA,
        checkpoint_dir=checkpoints,
        progress=updates.append,
        progress_interval=0,
    )
    assert retry.generated == ["h006", "h007", "h008", "h009"]  # only what no chunk held
    # progress counts the prompts left and their prompt tokens, as the plan counted them
    left = sum(r["prompt_tokens"] for r in read_table(plan).to_pylist()[6:])
    assert (updates[0].total, updates[0].total_tokens) == (4, left)
    assert (updates[-1].done, updates[-1].tokens) == (4, left) and updates[-1].finished
    assert updates[-1].working is not None and "prompt tokens/s" in updates[-1].line()
    rows = read_table(tmp_path / "out.parquet").to_pylist()
    assert sorted(r["input_hash"] for r in rows) == [f"h{i:03d}" for i in range(10)]
    assert sum(r["resumed"] for r in rows) == 6 == summary.resumed_inputs
    assert summary.valid == 10 and summary.valid_share == 1.0


class SlowStartingGenerator(FakeGenerator):
    """FAKE engine that takes 0.3 s to start on its first call, and says so, as vLLM does."""

    def generate(self, prompts, sampling, schema=None, stats=None, on_finished=None):
        if stats is not None and not self.generated:
            time.sleep(0.3)
            stats.add(GenerationStats(load_seconds=0.3))
        return super().generate(prompts, sampling, schema, stats, on_finished)


def progress_of(tmp_path, prompts: int, chunk_size: int, generator) -> tuple[list, Path]:  # noqa: ANN001
    """Every progress line of generating `prompts` prompts in chunks of `chunk_size` with
    `generator` (a class), and the plan."""
    prepared = write_prompts(tmp_path / "prepared.parquet", texts(prompts))
    plan = tmp_path / "plan.parquet"
    settings = PromptPlanSettings(chunk_size=chunk_size)
    plan_prompts(prepared, plan, FakeGenerator(), Sampling(), settings)
    updates: list = []
    execute_prompts(
        plan,
        tmp_path / "out.parquet",
        generator,
        Sampling(),
        SCHEMA,
        progress=updates.append,
        progress_interval=0,
    )
    return updates, plan


def test_the_engine_start_is_left_out_of_the_progress_rate(tmp_path):
    updates, _ = progress_of(tmp_path, 4, chunk_size=2, generator=SlowStartingGenerator)
    assert updates[-1].finished and updates[-1].elapsed - updates[-1].busy >= 0.3
    # set aside from the first prompt that finished on, not only once the chunk was written
    assert [u.done for u in updates][:3] == [0, 1, 2]
    assert all(u.elapsed - u.busy >= 0.3 for u in updates if u.done)


def test_progress_counts_prompts_as_they_finish_inside_a_chunk(tmp_path):
    updates, plan = progress_of(tmp_path, 7, chunk_size=4, generator=FakeGenerator)
    # a line as each prompt finished, not one per chunk of four
    done = [u.done for u in updates]
    assert done == sorted(done) and set(done) == set(range(8))
    planned = [r["prompt_tokens"] for r in read_table(plan).to_pylist()]
    tokens = [u.tokens for u in updates]
    assert tokens == sorted(tokens)
    assert [u.tokens for u in updates if u.done == 4][-1] == sum(planned[:4])  # chunk written
    assert updates[-1].tokens == sum(planned) and updates[-1].finished


def test_an_empty_plan_starts_no_engine(tmp_path):
    prepared = write_prompts(tmp_path / "prepared.parquet", [])
    plan_prompts(
        prepared, tmp_path / "plan.parquet", FakeGenerator(), Sampling(), PromptPlanSettings()
    )

    def no_engine():
        raise AssertionError("the engine was started for nothing")

    summary = execute_prompts(
        tmp_path / "plan.parquet", tmp_path / "out.parquet", no_engine, Sampling(), SCHEMA
    )
    assert summary.outputs == 0 and summary.valid_share is None
    assert summary.metadata()["requests_generated"] == 0


def test_sampling_settings_are_checked_and_greedy_ignores_the_seed():
    with pytest.raises(ValueError, match="max_tokens"):
        Sampling(max_tokens=0)
    assert Sampling(seed=1).identity() == Sampling(seed=2).identity()
    assert Sampling(temperature=0.5, seed=1).identity() != Sampling(temperature=0.5).identity()


def test_dtype_auto_is_decided_by_measuring_and_the_measurement_is_cached(tmp_path, monkeypatch):
    model = fake_chat_model()
    cache = tmp_path / "calibration.json"
    assert pick_generation_dtype("cpu", "float32", model, cache)[0] == "float32"
    assert pick_generation_dtype("cuda", "auto", model, cache)[0] == "bfloat16"
    monkeypatch.setattr(vllm_generator, "cpu_has_bf16_instructions", lambda: False)
    assert pick_generation_dtype("cpu", "auto", model, cache) == (
        "float32",
        "the CPU reports no bf16 instructions",
    )
    monkeypatch.setattr(vllm_generator, "cpu_has_bf16_instructions", lambda: True)
    timed = []

    def fake_matmul(dtype, *shape):  # FAKE clock: bf16 twice as fast
        timed.append(dtype)
        return 0.01 if dtype == "bfloat16" else 0.02

    monkeypatch.setattr(vllm_generator, "_matmul_seconds", fake_matmul)
    dtype, why = pick_generation_dtype("cpu", "auto", model, cache)
    assert dtype == "bfloat16" and "2.00x" in why
    assert pick_generation_dtype("cpu", "auto", model, cache)[0] == "bfloat16"
    assert timed == ["float32", "bfloat16"]  # measured once, then read from the cache
    slow = tmp_path / "slow.json"
    monkeypatch.setattr(vllm_generator, "_matmul_seconds", lambda dtype, *s: 0.01)
    assert pick_generation_dtype("cpu", "auto", model, slow)[0] == "float32"
    with pytest.raises(ValueError, match="dtype must be one of"):
        pick_generation_dtype("cpu", "int4", model, cache)


def test_a_prompt_s_own_max_tokens_caps_its_output_below_the_sampling_s():
    from batch_pipeline.inference.generator import Prompt, Sampling

    sampling = Sampling(max_tokens=40)
    long_user = " ".join(f"word{i}" for i in range(200))
    free, capped = Prompt("a", "", long_user), Prompt("b", "", long_user, max_tokens=5)
    assert (free.limit(sampling), capped.limit(sampling)) == (40, 5)
    assert Prompt("c", "", "x", max_tokens=99).limit(sampling) == 40  # never above the sampling
    out = FakeGenerator().generate([free, capped], sampling)
    assert [(o.output_tokens, o.finish_reason) for o in out] == [(25, "stop"), (5, "length")]
