"""Generation benchmark: vLLM's continuous batching against transformers' static batches.

    python -m batch_pipeline.bench.generation [--pages 100] [--max-tokens 64]
        [--page-tokens 512] [--model DIR] [--methods static-8,static-32,generate_batch,vllm]
        [--json-out F]

The same prompts for every method: the sample handbook's pages, each cut to its first
`--page-tokens` tokens, after one shared system prompt, through the model's chat template;
greedy decoding; the same `max_tokens`; the same model (default the shipped
SmolLM2-135M-Instruct) in the same dtype (`dtype: auto`'s choice on this machine). The
methods:

1. `static-8`, `static-32`: transformers `generate` on batches of 8 and 32 prompts in input
   order, left-padded to the batch's longest prompt; a batch decodes until its longest
   output is done. The baseline is `static-8`.
2. `generate_batch`: transformers' own continuous batching (paged cache), where the pinned
   version has it.
3. `vllm`: the project's `VllmGenerator` (continuous batching over a paged KV cache, prefix
   caching, chunked prefill), every prompt in one call; `vllm-chunked`: one call per
   `--chunk` prompts, each waiting for its longest output; `vllm-streamed`: the engine fed
   through its request API, `--chunk` prompts ahead, refilled as they finish (what execute
   does). `--varied` asks every other prompt for one line, capped at `SHORT_MAX_TOKENS`
   output tokens (its own `max_tokens`, as a real workload's short requests have), and the
   rest for a paragraph, up to `--max-tokens`.

Each method runs in a process of its own, one after another, so its peak memory is its own
(the resident set on CPU; on CUDA the device memory torch reserved). Model loading and one
warm-up call are outside the timed part. For each it prints output tokens/s, total tokens/s
(prompt + output over the same time), the idle share of the batch slots where it is
measurable (padding and finished sequences a static batch still carries), peak memory, and
the share of prompts whose greedy output is identical to `static-8`'s.

It imports torch, transformers and vLLM only (no dagster, pyarrow or pydantic), so it runs on
a bare GPU machine (`benchmarks/gpu_check.sh`).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batch_pipeline.arguments import whole_number

REPO = Path(__file__).resolve().parents[2]
HANDBOOK = REPO / "data" / "handbook"
SYSTEM_PROMPT = (
    "You are a support writer. Summarise the help-centre article below in two sentences for a "
    "support agent, then say who it is for."
)
MAX_NUM_SEQS = 32  # sequences at once, for both continuous batchers
PAGE_TOKENS = 128  # tokens per KV cache block (vLLM's on CPU)
METHODS = ("static-8", "static-32", "generate_batch", "vllm", "vllm-chunked", "vllm-streamed")
SHORT_PROMPT = "Say who the help-centre article below is for, in one short line."
SHORT_MAX_TOKENS = 16  # the one-line requests' own cap in the varied workload
LONG_PROMPT = (
    "Explain the help-centre article below to a new support agent in a full paragraph of at "
    "least eight sentences: what it covers, every step, and the pitfalls."
)
BASELINE = "static-8"


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_prompts(
    model_dir: Path, pages: int, page_tokens: int, varied: bool = False
) -> list[dict]:
    """The handbook pages (sorted by path), each cut to its first `page_tokens` tokens, after
    one system prompt; `varied`: every other page asks for one line, the rest for a
    paragraph, so output lengths vary as a real batch's do."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    files = sorted(HANDBOOK.rglob("*.md"))[:pages]
    prompts = []
    for path in files:
        ids = tokenizer(path.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
        user = tokenizer.decode(ids[:page_tokens])
        system = (
            (SHORT_PROMPT if len(prompts) % 2 == 0 else LONG_PROMPT) if varied else SYSTEM_PROMPT
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        prompt_ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        if hasattr(prompt_ids, "keys"):
            prompt_ids = prompt_ids["input_ids"]
        prompts.append(
            {
                "key": str(path.relative_to(HANDBOOK)),
                "system": system,
                "user": user,
                "ids": prompt_ids,
                "max_tokens": SHORT_MAX_TOKENS if system == SHORT_PROMPT else None,
            }
        )
    return prompts


def _peak_device_bytes() -> int | None:
    import torch

    return int(torch.cuda.max_memory_reserved()) if torch.cuda.is_available() else None


def _load_transformers(model_dir: Path, dtype: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype))
    return tokenizer, model.to(device).eval()


def _trimmed(tokens: list[int], eos: set[int]) -> list[int]:
    """Generated tokens up to and including the first end-of-sequence token."""
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens


def run_static(model_dir, dtype, prompts, max_tokens, batch_size) -> dict:
    import torch

    device = _device()
    tokenizer, model = _load_transformers(model_dir, dtype, device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = {model.generation_config.eos_token_id or tokenizer.eos_token_id}
    eos = {t for e in eos for t in (e if isinstance(e, list) else [e]) if t is not None}

    def batch_generate(batch: list[list[int]]) -> tuple[list[list[int]], int]:
        width = max(len(ids) for ids in batch)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch])
        with torch.inference_mode():
            out = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
        new = out[:, width:].tolist()
        return [_trimmed(row, eos) for row in new], len(batch) * out.shape[1]  # slots

    batch_generate([p["ids"] for p in prompts[:2]])  # warm-up, untimed
    outputs: list[list[int]] = []
    slots = 0
    started = time.perf_counter()
    for start in range(0, len(prompts), batch_size):
        generated, batch_slots = batch_generate(
            [p["ids"] for p in prompts[start : start + batch_size]]
        )
        outputs.extend(generated)
        slots += batch_slots
    seconds = time.perf_counter() - started
    useful = sum(len(p["ids"]) + len(o) for p, o in zip(prompts, outputs, strict=True))
    return {
        "seconds": seconds,
        "output_tokens": [len(o) for o in outputs],
        "texts": [tokenizer.decode(o, skip_special_tokens=True) for o in outputs],
        "idle_share": 1 - useful / slots if slots else None,
        "peak_device_bytes": _peak_device_bytes(),
    }


def run_generate_batch(model_dir, dtype, prompts, max_tokens) -> dict:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from batch_pipeline.inference.chat_models import resolve_chat_model
    from batch_pipeline.inference.devices import dtype_bytes
    from batch_pipeline.inference.vllm_generator import EngineSettings

    device = _device()
    tokenizer, model = _load_transformers(model_dir, dtype, device)
    if not hasattr(model, "generate_batch"):
        return {"unavailable": "this transformers has no generate_batch"}
    config = GenerationConfig(
        max_new_tokens=max_tokens,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
    )
    # the KV cache vLLM gets (left to itself it takes most of the free memory), the same
    # sequences at once, and pages of vLLM's CPU block size
    shape = resolve_chat_model(model_dir, REPO)
    cache_tokens = EngineSettings().kv_cache_bytes // shape.kv_bytes_per_token(dtype_bytes(dtype))
    batching = ContinuousBatchingConfig(
        page_size=PAGE_TOKENS,
        num_blocks=max(1, cache_tokens // PAGE_TOKENS),
        max_batch_tokens=2048,
        max_requests_per_batch=MAX_NUM_SEQS,
    )
    inputs = [p["ids"] for p in prompts]
    model.generate_batch(  # warm-up, untimed
        inputs=inputs[:2], generation_config=config, continuous_batching_config=batching
    )
    started = time.perf_counter()
    results = model.generate_batch(
        inputs=inputs, generation_config=config, continuous_batching_config=batching
    )
    seconds = time.perf_counter() - started
    by_prompt = {tuple(r.prompt_ids): r for r in results.values()}
    outputs = [list(by_prompt[tuple(ids)].generated_tokens) for ids in inputs]
    return {
        "seconds": seconds,
        "output_tokens": [len(o) for o in outputs],
        "texts": [tokenizer.decode(o, skip_special_tokens=True) for o in outputs],
        "idle_share": None,
        "peak_device_bytes": _peak_device_bytes(),
    }


def run_vllm(
    model_dir, dtype, prompts, max_tokens, mode: str = "one-call", chunk: int = 16
) -> dict:
    """The project's `VllmGenerator`: `one-call` hands every prompt to one `LLM.chat`;
    `chunked` calls it once per `chunk` prompts, each call waiting for its longest output (the
    execute stage before it streamed); `streamed` feeds the engine through its request API,
    `chunk` prompts ahead, refilled as they finish (the execute stage now)."""
    from batch_pipeline.inference.chat_models import resolve_chat_model
    from batch_pipeline.inference.generator import GenerationStats, Prompt, Sampling
    from batch_pipeline.inference.vllm_generator import EngineSettings, VllmGenerator

    device = _device()
    longest = max(len(p["ids"]) for p in prompts) + max_tokens
    settings = EngineSettings(
        device=device, dtype=dtype, max_model_len=max(2048, longest), max_num_seqs=MAX_NUM_SEQS
    )
    generator = VllmGenerator(resolve_chat_model(model_dir, REPO), settings)
    asks = [Prompt(p["key"], p["system"], p["user"], p.get("max_tokens")) for p in prompts]
    sampling = Sampling(max_tokens=max_tokens)
    generator.generate(asks[:2], sampling)  # starts the engine; warm-up, untimed
    stats = GenerationStats()
    started = time.perf_counter()
    if mode == "streamed":
        by_key = {o.key: o for o in generator.stream(asks, sampling, stats=stats, window=chunk)}
        outputs = [by_key[a.key] for a in asks]
    elif mode == "chunked":
        outputs = [
            o
            for i in range(0, len(asks), chunk)
            for o in generator.generate(asks[i : i + chunk], sampling, stats=stats)
        ]
    else:
        outputs = generator.generate(asks, sampling, stats=stats)
    stats.seconds = time.perf_counter() - started  # wall-clock, the same way for every mode
    return {
        "seconds": stats.seconds,
        "output_tokens": [o.output_tokens for o in outputs],
        "prompt_tokens_seen": [o.prompt_tokens for o in outputs],
        "texts": [o.text for o in outputs],
        "idle_share": None,
        "peak_device_bytes": _peak_device_bytes(),
        "prefix_cache_hit_rate": stats.prefix_cache_hit_rate,
        "preemptions": stats.preemptions,
        "engine_load_seconds": generator.load_seconds,
    }


def worker(method: str, work: Path) -> None:
    spec = json.loads((work / "spec.json").read_text())
    model_dir, dtype = Path(spec["model"]), spec["dtype"]
    prompts, max_tokens = spec["prompts"], spec["max_tokens"]
    if method.startswith("static-"):
        result = run_static(model_dir, dtype, prompts, max_tokens, int(method.split("-")[1]))
    elif method == "generate_batch":
        result = run_generate_batch(model_dir, dtype, prompts, max_tokens)
    elif method == "vllm":
        result = run_vllm(model_dir, dtype, prompts, max_tokens)
    elif method in ("vllm-chunked", "vllm-streamed"):
        mode = method.removeprefix("vllm-")
        result = run_vllm(model_dir, dtype, prompts, max_tokens, mode, spec["chunk"])
    else:
        raise SystemExit(f"unknown method {method!r}; use {', '.join(METHODS)}")
    (work / f"{method}.json").write_text(json.dumps(result))


def run_method(method: str, work: Path) -> dict:
    """Run one method in its own process; its result, with its peak resident memory."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = (work / f"{method}.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batch_pipeline.bench.generation",
            "--worker",
            method,
            "--work",
            str(work),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    out = work / f"{method}.json"
    if process.returncode != 0 or not out.is_file():
        tail = (work / f"{method}.log").read_text(errors="replace").splitlines()[-15:]
        return {"unavailable": f"exit {process.returncode}: " + " | ".join(tail)[-600:]}
    result = json.loads(out.read_text())
    result["peak_rss_bytes"] = usage.ru_maxrss * 1024
    return result


def _agreeing_share(text: str, reference: str) -> float:
    """How much of the reference output a text repeats before it first differs, in words."""
    words, ref = text.split(), reference.split()
    if not ref:
        return 1.0 if not words else 0.0
    same = 0
    for a, b in zip(words, ref, strict=False):
        if a != b:
            break
        same += 1
    return same / max(len(ref), len(words))


def summarise(results: dict[str, dict], prompts: list[dict]) -> list[dict]:
    prompt_tokens = sum(len(p["ids"]) for p in prompts)
    baseline = results.get(BASELINE, {})
    rows = []
    for method, r in results.items():
        if "unavailable" in r:
            rows.append({"method": method, "unavailable": r["unavailable"]})
            continue
        output = sum(r["output_tokens"])
        same = agree = None
        if "texts" in baseline:
            pairs = list(zip(r["texts"], baseline["texts"], strict=True))
            same = sum(a.strip() == b.strip() for a, b in pairs) / len(prompts)
            agree = sum(_agreeing_share(a, b) for a, b in pairs) / len(prompts)
        rows.append(
            {
                "method": method,
                "seconds": round(r["seconds"], 2),
                "output_tokens": output,
                "output_tokens_per_second": round(output / r["seconds"], 1),
                "total_tokens_per_second": round((output + prompt_tokens) / r["seconds"], 1),
                "idle_share": None if r["idle_share"] is None else round(r["idle_share"], 3),
                "peak_memory_mib": round(
                    (r.get("peak_device_bytes") or r["peak_rss_bytes"]) / 2**20
                ),
                "identical_to_baseline": None if same is None else round(same, 3),
                "agreeing_prefix_share": None if agree is None else round(agree, 3),
                **{k: r[k] for k in ("prefix_cache_hit_rate", "preemptions") if k in r},
            }
        )
    base = next((x for x in rows if x["method"] == BASELINE and "seconds" in x), None)
    for row in rows:
        if base and "seconds" in row:
            row["x_baseline"] = round(
                row["output_tokens_per_second"] / base["output_tokens_per_second"], 2
            )
    return rows


def print_table(rows: list[dict], about: dict) -> None:
    print(
        f"# {about['prompts']} prompts ({about['prompt_tokens']:,} prompt tokens), "
        f"max_tokens {about['max_tokens']}, {about['model']} in {about['dtype']} "
        f"({about['dtype_reason']}) on {about['device']}: {about['cpu']}"
    )
    header = (
        "method",
        "out tok/s",
        "x static-8",
        "total tok/s",
        "idle",
        "peak MiB",
        "same",
        "prefix",
    )
    print("{:<15}{:>11}{:>12}{:>13}{:>8}{:>10}{:>8}{:>8}".format(*header))
    for row in rows:
        if "unavailable" in row:
            print(f"{row['method']:<15}not measured: {row['unavailable']}")
            continue
        idle = "-" if row["idle_share"] is None else f"{row['idle_share']:.0%}"
        same, agree = row["identical_to_baseline"], row["agreeing_prefix_share"]
        same = "-" if same is None else f"{same:.0%}"
        agree = "-" if agree is None else f"{agree:.0%}"
        print(
            f"{row['method']:<15}{row['output_tokens_per_second']:>11,.1f}"
            f"{row.get('x_baseline', 0):>11.2f}x{row['total_tokens_per_second']:>13,.1f}"
            f"{idle:>8}{row['peak_memory_mib']:>10,}{same:>8}{agree:>8}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pages", type=whole_number(1), default=100, help="handbook pages (default 100)"
    )
    parser.add_argument(
        "--max-tokens", type=whole_number(1), default=64, help="output tokens per prompt"
    )
    parser.add_argument(
        "--page-tokens", type=whole_number(1), default=512, help="tokens kept per page"
    )
    parser.add_argument(
        "--varied",
        action="store_true",
        help="every other prompt asks for one line, the rest for a paragraph",
    )
    parser.add_argument(
        "--chunk",
        type=whole_number(1),
        default=16,
        help="prompts per call (vllm-chunked) or fed ahead (vllm-streamed); default 16",
    )
    parser.add_argument("--model", type=Path, default=None, help="a causal LM folder")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.worker:
        worker(args.worker, args.work)
        return
    from batch_pipeline.inference.calibration import CALIBRATION_FILE, cpu_model_name
    from batch_pipeline.inference.chat_models import resolve_chat_model
    from batch_pipeline.inference.vllm_generator import pick_generation_dtype

    home = Path(os.environ.get("BATCH_PIPELINE_HOME", ".batch_pipeline"))  # no pydantic needed
    model = resolve_chat_model(args.model, home)
    device = _device()
    dtype, why = pick_generation_dtype(device, args.dtype, model, home / CALIBRATION_FILE)
    prompts = build_prompts(model.path, args.pages, args.page_tokens, args.varied)
    methods = [m for m in args.methods.split(",") if m]
    if BASELINE not in methods:
        methods.insert(0, BASELINE)
    about = {
        "prompts": len(prompts),
        "prompt_tokens": sum(len(p["ids"]) for p in prompts),
        "max_tokens": args.max_tokens,
        "varied": args.varied,
        "chunk": args.chunk,
        "model": model.name,
        "dtype": dtype,
        "dtype_reason": why,
        "device": device,
        "cpu": cpu_model_name(),
        "cores": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="bench_generation-") as work:
        work = Path(work)
        spec = {
            "model": str(model.path),
            "dtype": dtype,
            "prompts": prompts,
            "max_tokens": args.max_tokens,
            "chunk": args.chunk,
        }
        (work / "spec.json").write_text(json.dumps(spec))
        results = {}
        for method in methods:
            print(f"== {method}", file=sys.stderr, flush=True)
            results[method] = run_method(method, work)
    rows = summarise(results, prompts)
    print_table(rows, about)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"about": about, "methods": rows}, indent=2))


if __name__ == "__main__":
    main()
