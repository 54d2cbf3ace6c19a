"""Rerun benchmark: does a chat model's greedy output depend on the batch it ran in?

    python -m batch_pipeline.bench.rerun [--pages 40] [--dtypes bfloat16,float32]
        [--max-tokens 256] [--json-out F]

A rerun after a crash sends the same prompts in other batches: the ones a checkpoint does not
hold, beside other documents, in another order. Whether the briefs may take an invalid output
as final ("greedy: it would come out the same") depends on whether that changes outputs.

For each dtype one engine (the project's `VllmGenerator`, the shipped SmolLM2-135M-Instruct,
the sample's brief prompt and output schema, greedy, constrained) briefs the handbook's first
`--pages` pages twice: all at once in file order, then streamed in reverse order, a few
prompts ahead (other batches, as a rerun's). It prints, per dtype, how many outputs differ
between the two passes, and how many changed validity (finished and matching the schema) one
way or the other.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from batch_pipeline.arguments import whole_number

REPO = Path(__file__).resolve().parents[2]
HANDBOOK = REPO / "data" / "handbook"
PROMPT = REPO / "data" / "brief_prompt.yaml"
SCHEMA = REPO / "data" / "brief_schema.json"
DOCUMENT_TOKENS = 512
WINDOW = 3  # the second pass's prompts ahead of the engine


def run_dtype(dtype: str, pages: int, max_tokens: int) -> dict:
    """Both passes of one dtype, in this process."""
    from batch_pipeline.config.prompt import load_prompt
    from batch_pipeline.inference.chat_models import resolve_chat_model
    from batch_pipeline.inference.generator import Prompt, Sampling, check_output
    from batch_pipeline.inference.vllm_generator import EngineSettings, VllmGenerator
    from batch_pipeline.state.storage import resolve_storage

    template = load_prompt(PROMPT, ("title", "text", "doc_id"))
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    model = resolve_chat_model(None, resolve_storage().home)
    settings = EngineSettings(dtype=dtype, max_model_len=2048, max_num_seqs=32)
    generator = VllmGenerator(model, settings)
    prompts = []
    for path in sorted(HANDBOOK.rglob("*.md"))[:pages]:
        text, _ = generator.truncate(path.read_text(encoding="utf-8"), DOCUMENT_TOKENS)
        user = template.render(title=path.stem, text=text, doc_id=path.name)
        prompts.append(Prompt(str(path.relative_to(HANDBOOK)), template.system, user))
    sampling = Sampling(max_tokens=max_tokens)
    first = {o.key: o for o in generator.generate(prompts, sampling, schema)}
    second = {o.key: o for o in generator.stream(prompts[::-1], sampling, schema, window=WINDOW)}
    rows = []
    for prompt in prompts:
        a, b = first[prompt.key], second[prompt.key]
        rows.append(
            {
                "key": prompt.key,
                "same": a.text == b.text,
                "valid": [check_output(o.text, o.finish_reason, schema).valid for o in (a, b)],
                "finish": [a.finish_reason, b.finish_reason],
            }
        )
    return {"dtype": dtype, "rows": rows}


def summarise(result: dict) -> dict:
    rows = result["rows"]
    return {
        "dtype": result["dtype"],
        "prompts": len(rows),
        "outputs_differing": sum(not r["same"] for r in rows),
        "valid_then_invalid": sum(r["valid"] == [True, False] for r in rows),
        "invalid_then_valid": sum(r["valid"] == [False, True] for r in rows),
        "invalid_both": sum(r["valid"] == [False, False] for r in rows),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=whole_number(1), default=40)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--max-tokens", type=whole_number(1), default=256)
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one dtype, in a process of its own
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_dtype(args.worker, args.pages, args.max_tokens)))
        return
    results = []
    for dtype in args.dtypes.split(","):
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        with tempfile.TemporaryFile("w+") as out:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "batch_pipeline.bench.rerun",
                    "--worker",
                    dtype,
                    "--pages",
                    str(args.pages),
                    "--max-tokens",
                    str(args.max_tokens),
                ],
                stdout=out,
                check=True,
                env=env,
                cwd=REPO,
            )
            out.seek(0)
            results.append(json.loads(out.read().strip().splitlines()[-1]))
    print(
        f"{'dtype':<10} {'prompts':>7} {'differ':>7} {'valid->invalid':>15} "
        f"{'invalid->valid':>15} {'invalid both':>13}"
    )
    for result in results:
        s = summarise(result)
        print(
            f"{s['dtype']:<10} {s['prompts']:>7} {s['outputs_differing']:>7} "
            f"{s['valid_then_invalid']:>15} {s['invalid_then_valid']:>15} {s['invalid_both']:>13}"
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
