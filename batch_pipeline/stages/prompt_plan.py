"""Stage 3 for chat models, the prompt plan: every prompt counted, sized and put in a chunk.

The input is a prepared prompt file (`input_hash`, `system`, `user`: one row per prompt, the
system part shared). For each prompt the plan

- counts its tokens with the model's own tokenizer, chat template included;
- refuses it when the prompt and `max_tokens` do not fit `max_model_len`, as that input's
  failure, saying by how much (the engine would refuse it, or cut its output);
- estimates its KV footprint: (prompt + `max_tokens`) x layers x KV heads x head dim x 2
  (keys and values) x bytes per value;
- puts it in a chunk of `chunk_size` prompts. Execute keeps the engine fed across chunks and
  checkpoints every `chunk_size` finished outputs (or every few seconds), so a crash
  regenerates at most about one chunk.

The estimated peak KV use is what the `max_num_seqs` largest sequences would hold at once,
against the configured cache: above 1, the engine will preempt (or queue) sequences.
Memory holds one read batch and the `max_num_seqs` largest footprints, not the plan.
"""

import heapq
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from batch_pipeline.config import ConfigError
from batch_pipeline.inference.devices import dtype_bytes
from batch_pipeline.inference.generator import Generator, Prompt, Sampling
from batch_pipeline.inference.vllm_generator import EngineSettings
from batch_pipeline.state.staging import StagePath, StageWriter, read_batches, stage_summary

PROMPT_COLUMNS = ["input_hash", "system", "user"]


def prepared_prompts_schema() -> pa.Schema:
    """What a product's prepare hands the prompt plan: one row per prompt."""
    return pa.schema(
        [
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("system", pa.string(), nullable=False),
            pa.field("user", pa.string(), nullable=False),
        ]
    )


def prompt_plan_schema() -> pa.Schema:
    return (
        prepared_prompts_schema()
        .append(pa.field("prompt_tokens", pa.int32(), nullable=False))
        .append(pa.field("kv_bytes", pa.int64(), nullable=False))
        .append(pa.field("chunk_index", pa.int32(), nullable=False))
    )


@dataclass(frozen=True)
class PromptPlanSettings:
    max_model_len: int = 2048
    max_num_seqs: int = 32
    chunk_size: int = 256  # prompts per checkpointed chunk
    kv_cache_bytes: int | None = None  # None: not known before the engine starts (CUDA)
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_num_seqs", "chunk_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


def plan_settings_for(engine: EngineSettings, chunk_size: int = 256) -> PromptPlanSettings:
    """The plan an engine built with these settings can run."""
    return PromptPlanSettings(
        max_model_len=engine.max_model_len,
        max_num_seqs=engine.max_num_seqs,
        chunk_size=chunk_size,
        kv_cache_bytes=engine.kv_cache_bytes,
        dtype_bytes=dtype_bytes(engine.dtype),
    )


@dataclass
class PromptPlanSummary:
    prompts: int = 0  # planned: sent to the engine
    refused: dict[str, str] = field(default_factory=dict)  # input_hash -> why
    prompt_tokens: int = 0
    max_prompt_tokens: int = 0
    chunks: int = 0
    kv_bytes_per_token: int = 0
    peak_kv_bytes: int = 0  # the max_num_seqs largest footprints together
    kv_cache_bytes: int | None = None
    max_tokens: int = 0
    chunk_size: int = 256  # prompts per checkpoint, and how many execute keeps fed ahead
    max_model_len: int | None = None  # what the prompts were refused against (None: older)

    def check_engine(self, max_model_len: int) -> None:
        """A ConfigError where the engine about to run the plan takes another
        `max_model_len` than the plan refused prompts against: vLLM's run-batch shortens a
        request's `max_tokens` to fit rather than refuse it, so briefs would be cut short
        silently (or a prompt refused that fits)."""
        if self.max_model_len is not None and self.max_model_len != max_model_len:
            raise ConfigError(
                f"max_model_len: the plan was made for {self.max_model_len} and the engine "
                f"takes {max_model_len}; plan again with the engine's settings (materialise "
                "brief_plan, or run the partition again)"
            )

    @property
    def peak_kv_share(self) -> float | None:
        """The estimated peak KV use over the configured cache (None: the cache is sized by
        the engine, on CUDA)."""
        if not self.kv_cache_bytes:
            return None
        return self.peak_kv_bytes / self.kv_cache_bytes

    def record(self) -> dict[str, object]:
        """What execute needs, in the plan file's footer."""
        return {
            "prompts": self.prompts,
            "refused": self.refused,
            "prompt_tokens": self.prompt_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "chunks": self.chunks,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "peak_kv_bytes": self.peak_kv_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "max_tokens": self.max_tokens,
            "chunk_size": self.chunk_size,
            "max_model_len": self.max_model_len,
        }

    def metadata(self) -> dict[str, object]:
        values: dict[str, object] = {
            "prompts_planned": self.prompts,
            "prompts_refused": len(self.refused),
            "prompt_tokens": self.prompt_tokens,
            "chunk_count": self.chunks,
        }
        if self.prompts:
            values.update(
                max_prompt_tokens=self.max_prompt_tokens,
                mean_prompt_tokens=round(self.prompt_tokens / self.prompts, 1),
                estimated_peak_kv_mib=round(self.peak_kv_bytes / 2**20, 2),
            )
            if self.peak_kv_share is not None:
                values["estimated_peak_kv_share"] = round(self.peak_kv_share, 4)
        return values


def plan_record(plan_path: StagePath | Path) -> PromptPlanSummary:
    """The summary a prompt plan wrote into its file's footer."""
    recorded = dict(stage_summary(plan_path))
    known = {k: recorded[k] for k in PromptPlanSummary.__dataclass_fields__ if k in recorded}
    return PromptPlanSummary(**known)


def refusal(prompt_tokens: int, max_tokens: int, max_model_len: int) -> str | None:
    """Why a prompt cannot be sent, or None."""
    if prompt_tokens + max_tokens <= max_model_len:
        return None
    return (
        f"prompt of {prompt_tokens} tokens + max_tokens {max_tokens} exceeds max_model_len "
        f"{max_model_len} by {prompt_tokens + max_tokens - max_model_len}"
    )


def plan_prompts(
    prepared_path: StagePath | Path,
    out_path: StagePath | Path,
    generator: Generator,
    sampling: Sampling,
    settings: PromptPlanSettings,
    read_rows: int = 1024,
) -> PromptPlanSummary:
    """Plan the prepared prompts (see the module docstring); writes the plan file."""
    started = time.perf_counter()
    model = generator.model
    summary = PromptPlanSummary(
        kv_bytes_per_token=model.kv_bytes_per_token(settings.dtype_bytes),
        kv_cache_bytes=settings.kv_cache_bytes,
        max_tokens=sampling.max_tokens,
        chunk_size=settings.chunk_size,
        max_model_len=settings.max_model_len,
    )
    largest: list[int] = []  # a min-heap of the max_num_seqs largest footprints
    with StageWriter(out_path, prompt_plan_schema(), started) as writer:
        for record_batch in read_batches(prepared_path, PROMPT_COLUMNS, batch_rows=read_rows):
            columns = record_batch.to_pydict()
            prompts = [
                Prompt(k, s, u)
                for k, s, u in zip(*(columns[c] for c in PROMPT_COLUMNS), strict=True)
            ]
            for prompt, tokens in zip(prompts, generator.token_counts(prompts), strict=True):
                why = refusal(tokens, sampling.max_tokens, settings.max_model_len)
                if why is not None:
                    summary.refused[prompt.key] = why
                    continue
                kv = (tokens + sampling.max_tokens) * summary.kv_bytes_per_token
                writer.write(
                    {
                        "input_hash": prompt.key,
                        "system": prompt.system,
                        "user": prompt.user,
                        "prompt_tokens": tokens,
                        "kv_bytes": kv,
                        "chunk_index": summary.prompts // settings.chunk_size,
                    }
                )
                summary.prompts += 1
                summary.prompt_tokens += tokens
                summary.max_prompt_tokens = max(summary.max_prompt_tokens, tokens)
                if len(largest) < settings.max_num_seqs:
                    heapq.heappush(largest, kv)
                else:
                    heapq.heappushpop(largest, kv)
        summary.chunks = -(-summary.prompts // settings.chunk_size)
        summary.peak_kv_bytes = sum(largest)
        writer.summary = summary.record()
    return summary
