"""The real chat-model generator: vLLM's offline engine (`vllm.LLM`), in this process, one
engine per generator.

vLLM does the batching: continuous batching (finished sequences leave the batch and waiting
ones join mid-flight), a paged KV cache allocated in blocks as tokens arrive, prefix caching
(the shared system prompt is computed once per block) and chunked prefill. This module only
configures it, hands it a chunk of prompts at a time and reads back the outputs and the
engine's own counters.

Structured outputs are decoded by xgrammar with no free whitespace: compact JSON, fewer
tokens, and no blank-line loops that a small model falls into and pays for in `max_tokens`.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so a Dagster step, a
test or the CLI needs no main guard and leaves no engine process behind. On CPU the KV cache
is `kv_cache_gib` of host memory (`VLLM_CPU_KVCACHE_SPACE`); on CUDA the engine takes
`gpu_memory_utilization` of the device.

`dtype: auto` is decided by measurement on CPU (`pick_generation_dtype`), and is bf16 on a GPU.
"""

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from batch_pipeline.inference.calibration import (
    CalibrationCache,
    cpu_has_bf16_instructions,
    cpu_model_name,
)
from batch_pipeline.inference.chat_models import ChatModel, ChatModelNotAvailableError
from batch_pipeline.inference.generator import Generation, GenerationStats, Prompt, Sampling
from batch_pipeline.inference.vllm_engine import first_line, loading, start_engine

GENERATION_DTYPES = ("auto", "bfloat16", "float16", "float32")
MIN_SPEEDUP = 1.15  # bf16 is taken on CPU only when its matmuls are at least this much faster


@dataclass(frozen=True)
class EngineSettings:
    """How the engine is built (see `GenerationResource` for each field's meaning)."""

    device: str = "cpu"  # cpu or cuda
    dtype: str = "bfloat16"  # resolved: never auto here
    kv_cache_gib: int = 1  # whole GiB: what vLLM's CPU engine takes
    gpu_memory_utilization: float = 0.85
    max_num_seqs: int = 32
    max_model_len: int = 2048
    enforce_eager: bool = True
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = 1  # GPUs one engine's layers are split over
    data_parallel_size: int = 1  # engines, one per GPU group: vllm-run-batch only

    @property
    def parallel_options(self) -> dict[str, int]:
        """vLLM's parallelism arguments, where they differ from one device."""
        options = {}
        if self.tensor_parallel_size > 1:
            options["tensor_parallel_size"] = self.tensor_parallel_size
        if self.data_parallel_size > 1:
            options["data_parallel_size"] = self.data_parallel_size
        return options

    @property
    def devices(self) -> int:
        """The GPUs the engines hold (tensor x data parallel), what execute's time is priced
        by; one on the CPU, whose engines share the one host."""
        return self.tensor_parallel_size * self.data_parallel_size if self.device == "cuda" else 1

    @property
    def kv_cache_bytes(self) -> int | None:
        """The KV cache's size where it is set in bytes (CPU); None on CUDA, where vLLM sizes
        it from `gpu_memory_utilization` after loading the weights."""
        return int(self.kv_cache_gib * (1 << 30)) if self.device == "cpu" else None


def generation_device(requested: str = "auto") -> str:
    """cuda where a CUDA device is present (or asked for), else cpu."""
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {requested!r}")
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# JSON without free whitespace between its tokens: a small model otherwise spends its output
# budget on blank lines (xgrammar is vLLM's own backend). Every executor's engine is built so.
STRUCTURED_OUTPUTS = {"backend": "xgrammar", "disable_any_whitespace": True}
ENGINE_SEED = 0


def _matmul_seconds(dtype: str, rows: int, inner: int, outer: int, repeats: int = 5) -> float:
    import torch

    kind = getattr(torch, dtype)
    a = torch.randn(rows, inner).to(kind)
    b = torch.randn(inner, outer).to(kind)
    torch.matmul(a, b)  # warm-up: kernel selection, allocator
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - started)
    return best


def pick_generation_dtype(
    device: str, requested: str, model: ChatModel, cache_path: Path | None = None
) -> tuple[str, str]:
    """The dtype the engine runs in, and why.

    An explicit dtype wins. On CUDA `auto` is bf16. On CPU `auto` is bf16 only where the CPU
    reports bf16 instructions and bf16 matmuls of the model's width measure at least
    `MIN_SPEEDUP` faster than fp32 (elsewhere torch emulates bf16, slowly); the measurement
    takes well under a second and is cached per CPU, torch and width."""
    if requested not in GENERATION_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(GENERATION_DTYPES)}, got {requested!r}")
    if requested != "auto":
        return requested, "set in the configuration"
    if device == "cuda":
        return "bfloat16", "bf16 on a GPU"
    if not cpu_has_bf16_instructions():
        return "float32", "the CPU reports no bf16 instructions"
    import torch

    width = model.hidden_size
    cache = CalibrationCache(cache_path)
    key = cache.key(
        purpose="generation-matmul",
        cpu=cpu_model_name(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        width=width,
    )
    measured = cache.get(key, [("torch", "float32"), ("torch", "bfloat16")])
    if measured is None:
        from batch_pipeline.inference.calibration import DtypeMeasurement

        rows = 256  # a prefill chunk's worth of tokens
        measured = tuple(
            DtypeMeasurement(dtype, _matmul_seconds(dtype, rows, width, width * 3), rows, 1.0)
            for dtype in ("float32", "bfloat16")
        )
        cache.put(key, measured, {"cpu": cpu_model_name(), "width": width})
    seconds = {m.dtype: m.seconds for m in measured}
    speedup = seconds["float32"] / seconds["bfloat16"] if seconds["bfloat16"] else 0.0
    if speedup >= MIN_SPEEDUP:
        return "bfloat16", f"bf16 matmuls measured {speedup:.2f}x fp32 on this CPU"
    return "float32", f"bf16 matmuls measured only {speedup:.2f}x fp32 on this CPU"


def engine_settings_for(
    model: ChatModel,
    device: str = "auto",
    dtype: str = "auto",
    calibration_cache: Path | None = None,
    **settings: object,
) -> EngineSettings:
    """The engine's settings for `model`: the device resolved, `dtype: auto` decided
    (`pick_generation_dtype`), and the rest as given (EngineSettings' defaults otherwise)."""
    resolved = generation_device(device)
    chosen, _why = pick_generation_dtype(resolved, dtype, model, calibration_cache)
    return EngineSettings(device=resolved, dtype=chosen, **settings)


def _finished_requests(on_finished: Callable[[int], None], iterable=None, **_bar: object):  # noqa: ANN001, ANN202
    """What `LLM.chat(use_tqdm=...)` calls where it would call tqdm: around the prompts it
    renders (passed through as they are), and for the bar of finished requests."""
    return iterable if iterable is not None else _FinishedRequests(on_finished)


class _FinishedRequests:
    """The bar vLLM updates as requests finish: it hands each update's count to
    `on_finished`. (vLLM's loop reads `format_dict["elapsed"]` and sets `postfix` for its own
    bar's text.)"""

    def __init__(self, on_finished: Callable[[int], None]) -> None:
        self.on_finished = on_finished
        self.n = 0
        self.postfix = ""
        self._started = time.perf_counter()

    @property
    def format_dict(self) -> dict[str, float]:
        return {"elapsed": max(time.perf_counter() - self._started, 1e-9)}

    def update(self, count: int = 1) -> None:
        self.n += count
        self.on_finished(count)

    def refresh(self) -> None:
        return None

    def close(self) -> None:
        return None


def _counter_totals(metrics: list) -> dict[str, float]:
    """vLLM's counters and histogram sums, summed over their labels."""
    totals: dict[str, float] = {}
    for metric in metrics:
        value = getattr(metric, "value", None)
        if value is None:
            value = getattr(metric, "sum", None)
        if isinstance(value, int | float):
            totals[metric.name] = totals.get(metric.name, 0.0) + float(value)
    return totals


class VllmGenerator:
    """A `Generator` on vLLM (see the module docstring). The tokenizer loads on first use
    (the prompt plan counts tokens with it) and the engine on the first `generate`."""

    device: str
    dtype: str

    def __init__(self, model: ChatModel, settings: EngineSettings) -> None:
        self.model = model
        self.settings = settings
        self.device = settings.device
        self.dtype = settings.dtype
        self.devices = settings.devices
        self._tokenizer = None
        self._llm = None
        self.load_seconds = 0.0

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoTokenizer

            folder = self.model.ready()
            with loading(f"the chat model's tokenizer at {folder}", ChatModelNotAvailableError):
                self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
        return self._tokenizer

    def token_counts(self, prompts: list[Prompt]) -> list[int]:
        from jinja2 import TemplateError

        try:
            return chat_token_counts(self.tokenizer, prompts)
        except TemplateError as error:  # a sandbox refusal (SecurityError) among them
            raise ChatModelNotAvailableError(
                f"the chat template of the chat model at {self.model.path} was refused "
                f"({type(error).__name__}: {first_line(error)}); give the model a template "
                "that renders messages only"
            ) from error

    def control_tokens(self) -> tuple[str, ...]:
        tokenizer = self.tokenizer
        return tuple(dict.fromkeys([*tokenizer.all_special_tokens, *tokenizer.get_added_vocab()]))

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens:
            return text, False
        return self.tokenizer.decode(ids[:max_tokens]), True

    @property
    def loaded(self) -> bool:
        return self._llm is not None

    def engine(self):
        """The engine, started once."""
        if self._llm is None:
            s = self.settings
            if s.data_parallel_size > 1:
                raise ValueError(
                    "data_parallel_size above 1 runs one engine per GPU group in processes of "
                    "their own: use the vllm-run-batch executor (vLLM's offline LLM is one "
                    "engine in one process)"
                )
            started = time.perf_counter()
            options: dict[str, object] = dict(s.parallel_options)
            if s.device == "cuda":
                options["gpu_memory_utilization"] = s.gpu_memory_utilization
            else:
                options["kv_cache_memory_bytes"] = s.kv_cache_bytes
            self._llm = start_engine(
                self.model.ready(),
                "the chat model",
                s.device,
                s.kv_cache_gib,
                ChatModelNotAvailableError,
                dtype=s.dtype,
                max_model_len=s.max_model_len,
                max_num_seqs=s.max_num_seqs,
                enforce_eager=s.enforce_eager,
                enable_prefix_caching=s.enable_prefix_caching,
                disable_log_stats=False,  # the counters the run's measures read
                structured_outputs_config=STRUCTURED_OUTPUTS,
                seed=ENGINE_SEED,
                **options,
            )
            self.load_seconds = time.perf_counter() - started
        return self._llm

    def generate(
        self,
        prompts: list[Prompt],
        sampling: Sampling,
        schema: dict | None = None,
        stats: GenerationStats | None = None,
        on_finished: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        if not prompts:
            return []
        fresh = not self.loaded
        llm = self.engine()  # first: it sets vLLM's environment and logging before vLLM loads
        if fresh and stats is not None:  # said now, so progress inside this call leaves it out
            stats.add(GenerationStats(load_seconds=self.load_seconds))
        params = self._params(sampling, schema)
        before = _counter_totals(llm.get_metrics())
        started = time.perf_counter()
        finished = False if on_finished is None else partial(_finished_requests, on_finished)
        outputs = llm.chat(
            [p.messages() for p in prompts], _each(params, prompts, sampling), use_tqdm=finished
        )
        seconds = time.perf_counter() - started
        out = [_generation(prompt, result) for prompt, result in zip(prompts, outputs, strict=True)]
        if stats is not None:
            stats.add(_run_stats(out, seconds, before, llm))
        return out

    @staticmethod
    def _params(sampling: Sampling, schema: dict | None):  # noqa: ANN205 - vLLM's SamplingParams
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        return SamplingParams(
            temperature=sampling.temperature,
            max_tokens=sampling.max_tokens,
            seed=None if sampling.greedy else sampling.seed,
            repetition_penalty=sampling.repetition_penalty,
            structured_outputs=None if schema is None else StructuredOutputsParams(json=schema),
        )

    def stream(
        self,
        prompts: Iterable[Prompt],
        sampling: Sampling,
        schema: dict | None = None,
        stats: GenerationStats | None = None,
        window: int = 256,
    ) -> Iterator[Generation]:
        """The prompts through the engine's request API, never drained: up to
        `max(window, 2 x max_num_seqs)` requests are enqueued (rendered as `LLM.chat` renders
        them), the engine is stepped here, and each output is yielded as it finishes while
        the next prompts take the freed places. Requests still in the engine when the caller
        stops (a crash, a signal) are aborted."""
        fresh = not self.loaded
        llm = self.engine()
        if fresh and stats is not None:
            stats.add(GenerationStats(load_seconds=self.load_seconds))
        params = self._params(sampling, schema)
        engine = llm.llm_engine
        ahead = max(window, 2 * self.settings.max_num_seqs)
        source = iter(prompts)
        waiting: dict[str, Prompt] = {}  # request id -> its prompt, while in the engine

        def refill() -> None:
            group = list(itertools.islice(source, ahead - len(waiting)))
            if group:
                ids = llm.enqueue_chat(
                    [p.messages() for p in group], _each(params, group, sampling), use_tqdm=False
                )
                # the engine's outputs carry the id LLM gave (a counter); it returns the
                # engine's internal one, that id with a random suffix
                waiting.update((i.split("-", 1)[0], p) for i, p in zip(ids, group, strict=True))

        before = _counter_totals(llm.get_metrics())
        started = time.perf_counter()
        done: list[Generation] = []
        try:
            refill()
            while waiting:
                for result in engine.step():
                    if not result.finished or result.request_id not in waiting:
                        continue
                    prompt = waiting.pop(result.request_id)
                    out = _generation(prompt, result)
                    done.append(out)
                    yield out
                refill()
                if waiting and not engine.has_unfinished_requests():
                    raise RuntimeError(
                        f"the engine finished without {len(waiting)} of its requests"
                    )
        finally:
            if waiting:
                engine.abort_request(list(waiting))
        if stats is not None:
            stats.add(_run_stats(done, time.perf_counter() - started, before, llm))

    def close(self) -> None:
        """Stop the engine and free its KV cache."""
        if self._llm is not None:
            engine = getattr(self._llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None)
            if callable(shutdown):
                shutdown()
            self._llm = None


def _each(params, prompts: list[Prompt], sampling: Sampling):  # noqa: ANN001, ANN202
    """vLLM's sampling params for each prompt: `params`, capped where a prompt caps its own
    output (`Prompt.max_tokens`); `params` itself when none does."""
    if all(p.max_tokens is None for p in prompts):
        return params
    capped = []
    for prompt in prompts:
        mine = params
        if prompt.limit(sampling) != params.max_tokens:
            mine = params.clone()
            mine.max_tokens = prompt.limit(sampling)
        capped.append(mine)
    return capped


def _generation(prompt: Prompt, result) -> Generation:  # noqa: ANN001 - a RequestOutput
    completion = result.outputs[0]
    return Generation(
        key=prompt.key,
        text=completion.text,
        finish_reason=str(completion.finish_reason or "abort"),
        prompt_tokens=len(result.prompt_token_ids or []),
        output_tokens=len(completion.token_ids),
        cached_tokens=int(result.num_cached_tokens or 0),
    )


def _run_stats(out: list[Generation], seconds: float, before: dict, llm) -> GenerationStats:  # noqa: ANN001
    """What one call or stream did: its outputs, seconds, and the engine's counters' change
    since `before` (prefill and decode time, prefix cache, preemptions)."""
    after = _counter_totals(llm.get_metrics())
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    return GenerationStats(
        requests=len(out),
        prompt_tokens=sum(g.prompt_tokens for g in out),
        output_tokens=sum(g.output_tokens for g in out),
        cached_prompt_tokens=sum(g.cached_tokens for g in out),
        seconds=seconds,
        prefill_seconds=delta.get("vllm:request_prefill_time_seconds", 0.0),
        decode_seconds=delta.get("vllm:request_decode_time_seconds", 0.0),
        prefix_cache_queries=int(delta.get("vllm:prefix_cache_queries", 0)),
        prefix_cache_hits=int(delta.get("vllm:prefix_cache_hits", 0)),
        preemptions=int(delta["vllm:num_preemptions"]) if "vllm:num_preemptions" in delta else None,
        calls=1,
    )


def chat_token_counts(tokenizer, prompts: list[Prompt]) -> list[int]:
    """Each prompt's tokens as the engine will see them: the chat template applied, the
    assistant's turn opened."""
    encoded = tokenizer.apply_chat_template(
        [p.messages() for p in prompts], add_generation_prompt=True, tokenize=True
    )
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return [len(ids) for ids in encoded]
