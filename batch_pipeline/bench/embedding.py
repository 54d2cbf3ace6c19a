"""Throughput benchmark: the project's scheduler + runner against `SentenceTransformer.encode`
and ONNX Runtime, on one CPU or GPU.

    python -m batch_pipeline.bench [--rounds 5] [--device auto] [--backend auto] [--json-out F]

On the fixed chunk set `benchmarks/chunks.jsonl`, in one process, with one loaded model, it
alternates (a) `model.encode(texts, batch_size=32)`, (c) on CPU, ONNX Runtime fp32 with
length-sorted batches of 32 (how FastEmbed and Infinity run; `batch_pipeline.bench.anchors`)
and (b) the batch plan (tokenising once to count, de-duplication, sorting, packing under a
padded-token budget) run through `EmbeddingRunner`, which pads the planned token ids as
execute does, on the path `auto` chose (measured here, on the set's median-length inputs, as
execute measures it), and on CPU (d) the same plan on OpenVINO's int8 model
(`model.precision: fixed_accuracy`, `dtype: int8`, calibrated on the set's first 300 chunks
as a collection's first run pins them), and (e) the same plan on the `vllm` embedding
executor (vLLM's `LLM.embed`, fp32 on CPU, fp16 on a GPU; left out where vLLM is not
installed, or with --no-vllm), over several rounds (forwards, then backwards). It prints
each path's tokens/s, ratio to (a), minimum cosine to (a), padding efficiency, peak RSS and,
on CPU, share of the roofline (cores x clock x FLOP per cycle, stated; int8's is twice
bf16's where the CPU has bf16 dot products) at the nominal clock and at the clock measured
after the rounds, with the path decision and what calibrating cost. On CUDA it prints the
fraction of the bf16 roofline reached instead.

It imports torch and sentence-transformers only (no dagster, lancedb or pyarrow; openvino,
onnxruntime and vllm where they are installed), so it runs on a bare GPU machine.
"""

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from batch_pipeline.arguments import whole_number
from batch_pipeline.bench.anchors import cpu_roofline, measured_clock_ghz
from batch_pipeline.bench.embedding_contenders import (
    TimedRun,
    int8_runner,
    model_config_of,
    onnx_anchor,
    run_anchor,
    vllm_embedder,
)
from batch_pipeline.inference.batching import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_TOKEN_BUDGET,
    PlanSettings,
    budget_from_memory,
)
from batch_pipeline.inference.calibration import cosines, median_sample, min_cosine
from batch_pipeline.inference.devices import BACKENDS
from batch_pipeline.inference.embedder import Embedder, RunStats
from batch_pipeline.inference.models import ResolvedModel, resolve_model
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.measures.memory import PeakRss
from batch_pipeline.stages.plan import plan_inputs

CHUNK_SET = Path(__file__).resolve().parents[2] / "benchmarks" / "chunks.jsonl"
BASELINE_BATCH_SIZE = 32
BF16_PEAK_FLOPS = 790e12  # H200 dense bf16, as measured on these machines (roughly)


def load_chunks(path: Path = CHUNK_SET) -> list[str]:
    with path.open() as handle:
        return [json.loads(line)["text"] for line in handle if line.strip()]


def baseline_padding(texts: list[str], token_counts: list[int]) -> tuple[int, int]:
    """Real and padded tokens of encode(batch_size=32): it sorts by character length."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    padded = 0
    for start in range(0, len(order), BASELINE_BATCH_SIZE):
        batch = [token_counts[i] for i in order[start : start + BASELINE_BATCH_SIZE]]
        padded += len(batch) * max(batch)
    return sum(token_counts), padded


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def device_budget(runner: EmbeddingRunner, model: ResolvedModel) -> int:
    """The padded-token budget the benchmarks plan with: on CUDA, what the device's free
    memory holds at 2 bytes per value; elsewhere, the pipeline's default."""
    if runner.device.startswith("cuda"):
        return budget_from_memory(runner.cuda_free_bytes(), model, 2)
    return DEFAULT_TOKEN_BUDGET


def run_baseline(runner: EmbeddingRunner, texts: list[str]) -> TimedRun:
    synchronize(runner.device)
    with PeakRss() as rss:
        start = time.perf_counter()
        vectors = runner.model.encode(
            texts, batch_size=BASELINE_BATCH_SIZE, convert_to_numpy=True, show_progress_bar=False
        )
        synchronize(runner.device)
        seconds = time.perf_counter() - start
    return TimedRun(seconds, rss.peak, np.asarray(vectors, dtype=np.float32))


def run_engine(
    runner: EmbeddingRunner,
    texts: list[str],
    settings: PlanSettings,
    model: ResolvedModel,
    engine: Embedder | None = None,
) -> tuple[TimedRun, dict]:
    """The pipeline's path: tokenise once to count (prepare), plan (dedupe, sort, pack), run
    the planned token ids (execute) on `engine` (default: `runner`); all inside the timer."""
    synchronize(runner.device)
    with PeakRss() as rss:
        start = time.perf_counter()
        token_ids = runner.token_ids(texts)
        unique, batches, summary = plan_inputs(texts, [len(i) for i in token_ids], settings, model)
        planned = time.perf_counter() - start
        out = np.zeros((len(texts), runner.dimension), dtype=np.float32)
        stats = RunStats()
        jobs = (
            (
                [unique[i] for i in b.indices],
                [texts[unique[i]] for i in b.indices],
                [token_ids[unique[i]] for i in b.indices],
            )
            for b in batches
        )
        for positions, vectors in (engine or runner).run(jobs, stats):
            out[positions] = vectors
        # a repeated text was embedded once, at its first position: give every repeat its vector
        first: dict[str, int] = {}
        out = out[[first.setdefault(text, i) for i, text in enumerate(texts)]]
        synchronize(runner.device)
        seconds = time.perf_counter() - start
    info = {
        "plan_seconds": planned,
        "padding_efficiency": summary.padding_efficiency,
        "batches": summary.batches,
        "oom_splits": stats.oom_splits,
        "inputs_tokenized": stats.tokenized,
    }
    return TimedRun(seconds, rss.peak, out), info


def path_row(
    name: str,
    dtype: str,
    runs: list[TimedRun],
    baseline: list[TimedRun],
    padding_efficiency: float,
    real_tokens: int,
) -> dict[str, object]:
    """One path's line of the result: its median speed, its median ratio to the baseline's
    runs of the same rounds, and its last vectors' minimum cosine to the baseline's."""
    median_seconds = statistics.median(m.seconds for m in runs)
    chunks = len(runs[-1].vectors)
    ratios = [a.seconds / b.seconds for a, b in zip(baseline, runs, strict=True)]
    return {
        "name": name,
        "dtype": dtype,
        "seconds_median": round(median_seconds, 4),
        "chunks_per_s": round(chunks / median_seconds, 1),
        "tokens_per_s": round(real_tokens / median_seconds, 1),
        "padding_efficiency": round(padding_efficiency, 4),
        "peak_rss_mib": round(max(m.peak_rss for m in runs) / 2**20, 1),
        "ratio_over_a_median": round(statistics.median(ratios), 3),
        "min_cosine_vs_a": round(min_cosine(runs[-1].vectors, baseline[-1].vectors), 7),
    }


def flops(token_counts: list[int], model: ResolvedModel) -> float:
    """Model FLOPs for the real tokens: 2 x parameters-per-token plus attention (QK^T and AV)."""
    per_token_params = model.num_layers * (
        4 * model.hidden_size**2 + 2 * model.hidden_size * model.intermediate_size
    )
    return float(
        sum(
            2 * per_token_params * n + 4 * n * n * model.hidden_size * model.num_layers
            for n in token_counts
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batch_pipeline.bench", description=__doc__)
    parser.add_argument("--rounds", type=whole_number(1), default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--backend", default="auto", choices=BACKENDS)
    parser.add_argument(
        "--token-budget", type=whole_number(1), default=None, help="default: by device"
    )
    parser.add_argument("--max-batch-size", type=whole_number(1), default=DEFAULT_MAX_BATCH_SIZE)
    parser.add_argument("--threads", type=whole_number(1), default=None)
    parser.add_argument("--chunks", default=str(CHUNK_SET))
    parser.add_argument("--model-path", default=os.environ.get("BATCH_PIPELINE_MODEL_PATH"))
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--no-int8", action="store_true", help="leave out (d), the int8 path")
    parser.add_argument(
        "--no-vllm", action="store_true", help="leave out (e), the vllm embedding executor"
    )
    args = parser.parse_args(argv)

    texts = load_chunks(Path(args.chunks))
    model = resolve_model(model_config_of(args))
    loading = time.perf_counter()
    runner = EmbeddingRunner(
        model, device=args.device, dtype=args.dtype, backend=args.backend, num_threads=args.threads
    )
    load_seconds = time.perf_counter() - loading
    budget = args.token_budget or device_budget(runner, model)
    settings = PlanSettings(token_budget=budget, max_batch_size=args.max_batch_size)
    counts = runner.token_counts(texts)
    real, padded_a = baseline_padding(texts, counts)
    # the path, chosen as execute chooses it: on median-length inputs, measured afresh here
    runner.calibrate(median_sample(texts, counts))
    anchor, anchor_note = onnx_anchor(runner, model)
    int8, int8_note = (None, None) if args.no_int8 else int8_runner(runner, args, texts)
    int8_model = int8.resolved if int8 is not None else None
    vllm, vllm_note = (None, None) if args.no_vllm else vllm_embedder(runner, model)

    # warm-up: kernels, allocator, thread pools
    run_baseline(runner, texts[:64])
    run_engine(runner, texts[:64], settings, model)
    if anchor is not None:
        run_anchor(anchor, texts[:64], counts[:64])
    if int8 is not None:
        run_engine(int8, texts[:64], settings, int8_model)
    if vllm is not None:
        run_engine(runner, texts[:64], settings, model, vllm)

    a_runs: list[TimedRun] = []
    b_runs: list[tuple[TimedRun, dict]] = []
    c_runs: list[TimedRun] = []
    d_runs: list[tuple[TimedRun, dict]] = []
    e_runs: list[tuple[TimedRun, dict]] = []
    paths = ["a", "b"] + (["c"] if anchor is not None else []) + (["d"] if int8 else [])
    paths += ["e"] if vllm is not None else []
    for round_index in range(args.rounds):
        for which in paths if round_index % 2 == 0 else paths[::-1]:
            if which == "a":
                a_runs.append(run_baseline(runner, texts))
            elif which == "b":
                b_runs.append(run_engine(runner, texts, settings, model))
            elif which == "c":
                c_runs.append(run_anchor(anchor, texts, counts))
            elif which == "d":
                d_runs.append(run_engine(int8, texts, settings, int8_model))
            else:
                e_runs.append(run_engine(runner, texts, settings, model, vllm))
        print(
            f"round {round_index + 1}/{args.rounds}: a {a_runs[-1].seconds:.2f}s  "
            f"b {b_runs[-1][0].seconds:.2f}s"
            + (f"  c {c_runs[-1].seconds:.2f}s" if c_runs else "")
            + (f"  d {d_runs[-1][0].seconds:.2f}s" if d_runs else "")
            + (f"  e {e_runs[-1][0].seconds:.2f}s" if e_runs else ""),
            file=sys.stderr,
        )

    b_measured = [m for m, _ in b_runs]
    info = b_runs[-1][1]
    decision = runner.dtype_decision
    rows = {
        "a": {
            **path_row(
                f"SentenceTransformer.encode(batch_size={BASELINE_BATCH_SIZE})",
                "float32",
                a_runs,
                a_runs,
                real / padded_a,
                real,
            ),
            "ratio_over_a_median": 1.0,  # the baseline itself
            "min_cosine_vs_a": 1.0,
        },
        "b": {
            **path_row(
                f"batch_pipeline plan + EmbeddingRunner ({runner.backend} {runner.dtype})",
                runner.dtype,
                b_measured,
                a_runs,
                info["padding_efficiency"],
                real,
            ),
            "plan_seconds": round(info["plan_seconds"], 4),
            "batches": info["batches"],
            # 0: (b) padded the token ids it counted, as execute pads the plan's
            "inputs_tokenized": info["inputs_tokenized"],
        },
    }
    if c_runs:
        rows["c"] = {
            **path_row(
                anchor.name, "float32", c_runs, a_runs, anchor.padding_efficiency(counts), real
            ),
            "export_seconds": round(anchor.export_seconds, 3),
        }
    if d_runs:
        d_info = d_runs[-1][1]
        d_measured = [m for m, _ in d_runs]
        rows["d"] = {
            **path_row(
                "batch_pipeline plan + EmbeddingRunner (openvino int8)",
                "int8",
                d_measured,
                a_runs,
                d_info["padding_efficiency"],
                real,
            ),
            "mean_cosine_vs_a": round(
                float(np.mean(cosines(d_measured[-1].vectors, a_runs[-1].vectors))), 6
            ),
            "ratio_over_b_median": round(
                statistics.median(
                    b.seconds / d.seconds for b, d in zip(b_measured, d_measured, strict=True)
                ),
                3,
            ),
            "quantize_seconds": round(int8.export_seconds, 3),
        }
    if e_runs:
        e_measured = [m for m, _ in e_runs]
        rows["e"] = {
            **path_row(
                f"batch_pipeline plan + executor vllm (LLM.embed {vllm.dtype})",
                vllm.dtype,
                e_measured,
                a_runs,
                1.0,  # vLLM packs sequences: no padding
                real,
            ),
            "ratio_over_b_median": round(
                statistics.median(
                    b.seconds / e.seconds for b, e in zip(b_measured, e_measured, strict=True)
                ),
                3,
            ),
        }
    ratios = [a.seconds / b.seconds for a, b in zip(a_runs, b_measured, strict=True)]
    result = {
        "chunks": len(texts),
        "real_tokens": real,
        "device": runner.device,
        "device_name": runner.device_name(),
        "dtype": runner.dtype,
        "backend": runner.backend,
        "dtype_decision": decision.metadata() if decision else None,
        "model_load_seconds": round(load_seconds, 3),
        "threads": runner.num_threads,
        "token_budget": settings.token_budget,
        "max_batch_size": settings.max_batch_size,
        "rounds": args.rounds,
        **rows,
        "ratio_b_over_a_median": rows["b"]["ratio_over_a_median"],
        "ratio_b_over_a_rounds": [round(r, 3) for r in ratios],
        "min_cosine_b_vs_a": rows["b"]["min_cosine_vs_a"],
    }
    if anchor_note:
        result["anchor_note"] = anchor_note
    if int8_note:
        result["int8_note"] = int8_note
    if vllm_note:
        result["vllm_note"] = vllm_note
    work = flops(counts, model)
    result["flop_per_token"] = round(work / real)
    if runner.device.startswith("cuda"):
        a_med = statistics.median(m.seconds for m in a_runs)
        b_med = statistics.median(m.seconds for m in b_measured)
        result["roofline_fraction_bf16"] = {
            "a": round(work / a_med / BF16_PEAK_FLOPS, 5),
            "b": round(work / b_med / BF16_PEAK_FLOPS, 5),
        }
    elif runner.device == "cpu":
        # the clock measured now, with the cores warm from the rounds
        roof = cpu_roofline(runner.num_threads, measured_clock_ghz())
        result["roofline"] = {
            **asdict(roof),
            "description": roof.describe(),
            "fp32_tokens_per_s": _per_token(roof.flops("float32"), work / real),
            "bf16_tokens_per_s": _per_token(roof.flops("bfloat16"), work / real),
            "bf16_tokens_per_s_measured_clock": _per_token(
                roof.flops("bfloat16", measured=True), work / real
            ),
            "int8_tokens_per_s": _per_token(roof.flops("int8"), work / real),
        }
        for key in ("a", "b", "c", "d", "e"):
            if key in result:
                seconds = result[key]["seconds_median"]
                for field, measured in (
                    ("roofline_share", False),
                    ("roofline_share_measured_clock", True),
                ):
                    peak = roof.flops(result[key]["dtype"], measured)
                    result[key][field] = round(work / seconds / peak, 4) if peak else None
    _print_table(result)
    print(json.dumps(result, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    return 0


def _per_token(peak: float | None, flop_per_token: float) -> float | None:
    return round(peak / flop_per_token, 1) if peak else None


def _print_table(result: dict) -> None:
    print(
        f"\n{result['chunks']} chunks, {result['real_tokens']} tokens, device {result['device']} "
        f"({result['device_name']}, {result['threads']} threads), {result['rounds']} rounds, "
        f"budget {result['token_budget']} padded tokens / {result['max_batch_size']} inputs"
    )
    decision = result.get("dtype_decision")
    if decision:
        print(
            f"path {decision['backend_decision']}/{decision['dtype_decision']}: "
            f"{decision['dtype_reason']} (calibration {decision['dtype_calibration_seconds']} s"
            + (
                f", OpenVINO export {decision['backend_export_seconds']} s"
                if decision.get("backend_export_seconds")
                else ""
            )
            + ")"
        )
    roof = result.get("roofline")
    if roof:
        print(
            f"roofline: {roof['description']} = {roof['fp32_tokens_per_s']} fp32 / "
            f"{roof['bf16_tokens_per_s']} bf16 tokens/s at {result['flop_per_token']:,} "
            "FLOP per token"
            + (
                f"; {roof['bf16_tokens_per_s_measured_clock']} bf16 tokens/s at the measured clock"
                if roof.get("bf16_tokens_per_s_measured_clock")
                else ""
            )
        )
    measured = (roof or {}).get("measured_clock_ghz")
    at_clock = f"at {measured:.2f}" if measured else "measured"
    header = (  # the roofline's share at the nominal clock, then at the measured one
        f"{'':<66}{'tokens/s':>10}{'x encode':>10}{'min cos':>11}{'roofline':>10}"
        f"{at_clock:>9}{'padding':>9}{'RSS MiB':>9}"
    )
    print(header)
    for key in ("a", "c", "b", "d", "e"):
        if key not in result:
            continue
        row = result[key]
        share, at = row.get("roofline_share"), row.get("roofline_share_measured_clock")
        print(
            f"({key}) {row['name']:<62}{row['tokens_per_s']:>10}{row['ratio_over_a_median']:>10}"
            f"{row['min_cosine_vs_a']:>11.6f}"
            f"{(f'{share:.0%}' if share is not None else '-'):>10}"
            f"{(f'{at:.0%}' if at is not None else '-'):>9}"
            f"{row['padding_efficiency']:>9.1%}{row['peak_rss_mib']:>9}"
        )
    if "d" in result:
        d = result["d"]
        print(
            f"(d) int8: {d['ratio_over_b_median']}x (b); mean cosine {d['mean_cosine_vs_a']:.6f}; "
            f"quantized in {d['quantize_seconds']} s (once per sample and machine)"
            + (f"; int8 roofline {roof['int8_tokens_per_s']} tokens/s" if roof else "")
        )
    if "e" in result:
        print(f"(e) vllm: {result['e']['ratio_over_b_median']}x (b), the local executor")
    for note in ("anchor_note", "int8_note", "vllm_note"):
        if note in result:
            print(result[note])
    if "roofline_fraction_bf16" in result:
        roof = result["roofline_fraction_bf16"]
        print(f"bf16 roofline fraction: a {roof['a']:.2%}  b {roof['b']:.2%}")
    print()


if __name__ == "__main__":
    sys.exit(main())
