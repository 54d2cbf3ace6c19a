"""Stage 3, the batch plan: pack stale model inputs into batches under a padded-token budget.

Inputs are de-duplicated (identical inputs are embedded once), sorted by token length and
packed greedily: a batch grows while `batch_size x longest_input <= token_budget` and
`batch_size <= max_batch_size`. Sorting makes the longest input of a batch its last, so padding
stays small, and long inputs end up in small batches of their own.

On CUDA the budget is derived from free device memory and the model's shape
(`budget_from_memory`); on CPU it is a setting.
"""

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from batch_pipeline.models import ResolvedModel

DEFAULT_TOKEN_BUDGET = 4096
DEFAULT_MAX_BATCH_SIZE = 128


@dataclass(frozen=True)
class PlanSettings:
    token_budget: int = DEFAULT_TOKEN_BUDGET
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE

    def __post_init__(self) -> None:
        if self.token_budget < 1 or self.max_batch_size < 1:
            raise ValueError("token_budget and max_batch_size must be positive")


def activation_bytes(batch_size: int, seq_len: int, model: ResolvedModel, dtype_bytes: int) -> int:
    """Estimated peak activation memory of one forward pass of a batch, in bytes.

    Per layer the live tensors are the hidden states and their projections (about
    4 x hidden + intermediate values per token) and, per head, the attention scores and
    probabilities, which grow with the square of the sequence length.
    """
    per_token = 4 * model.hidden_size + model.intermediate_size
    attention = 2 * model.num_heads * seq_len * seq_len
    return dtype_bytes * batch_size * (seq_len * per_token + attention)


def budget_from_memory(
    free_bytes: int, model: ResolvedModel, dtype_bytes: int, fraction: float = 0.5
) -> int:
    """The padded-token budget that keeps a worst-case batch within `fraction` of free memory."""
    seq = model.max_seq_length
    per_padded_token = activation_bytes(1, seq, model, dtype_bytes) / seq
    return max(seq, int(free_bytes * fraction / per_padded_token))


@dataclass
class Batch:
    indices: list[int]
    max_tokens: int

    @property
    def padded_tokens(self) -> int:
        return len(self.indices) * self.max_tokens


def pack_batches(token_counts: list[int], settings: PlanSettings) -> list[Batch]:
    """Greedy packing of inputs sorted by length; returns batches of indices into the input."""
    order = sorted(range(len(token_counts)), key=lambda i: token_counts[i])
    batches: list[Batch] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = max(1, token_counts[i])
        if current and (
            (len(current) + 1) * max(longest, length) > settings.token_budget
            or len(current) >= settings.max_batch_size
        ):
            batches.append(Batch(current, longest))
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(Batch(current, longest))
    return batches


@dataclass
class PlanSummary:
    inputs: int = 0
    duplicates_folded: int = 0
    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    largest_batch_bytes: int = 0
    token_budget: int = 0
    max_batch_size: int = 0

    @property
    def padding_efficiency(self) -> float:
        return self.real_tokens / self.padded_tokens if self.padded_tokens else 1.0

    def metadata(self) -> dict[str, object]:
        sizes = self.batch_sizes or [0]
        histogram = Counter(
            next(f"<={b}" for b in (1, 4, 16, 32, 64, 128, 256, 10**9) if s <= b)
            for s in self.batch_sizes
        )
        return {
            "inputs_planned": self.inputs,
            "duplicates_folded": self.duplicates_folded,
            "batch_count": self.batches,
            "real_tokens": self.real_tokens,
            "padded_tokens": self.padded_tokens,
            "padding_efficiency": round(self.padding_efficiency, 4),
            "batch_size_min": min(sizes),
            "batch_size_median": float(statistics.median(sizes)),
            "batch_size_max": max(sizes),
            "batch_size_histogram": dict(sorted(histogram.items())),
            "largest_batch_estimated_mib": round(self.largest_batch_bytes / 2**20, 2),
            "token_budget": self.token_budget,
            "max_batch_size": self.max_batch_size,
        }


def plan_inputs(
    input_hashes: list[str],
    token_counts: list[int],
    settings: PlanSettings,
    model: ResolvedModel,
    dtype_bytes: int = 4,
) -> tuple[list[int], list[Batch], PlanSummary]:
    """De-duplicate by input hash and pack. Returns (unique indices, batches over them, summary)."""
    first: dict[str, int] = {}
    for i, key in enumerate(input_hashes):
        first.setdefault(key, i)
    unique = sorted(first.values())
    counts = [token_counts[i] for i in unique]
    batches = pack_batches(counts, settings)
    summary = PlanSummary(
        inputs=len(unique),
        duplicates_folded=len(input_hashes) - len(unique),
        batches=len(batches),
        real_tokens=sum(counts),
        padded_tokens=sum(b.padded_tokens for b in batches),
        batch_sizes=[len(b.indices) for b in batches],
        largest_batch_bytes=max(
            (activation_bytes(len(b.indices), b.max_tokens, model, dtype_bytes) for b in batches),
            default=0,
        ),
        token_budget=settings.token_budget,
        max_batch_size=settings.max_batch_size,
    )
    return unique, batches, summary


def plan_stale_chunks(
    chunks_path: Path,
    out_path: Path,
    settings: PlanSettings,
    model: ResolvedModel,
    dtype_bytes: int = 4,
    bucket_rows: int = 16384,
) -> PlanSummary:
    """Plan every stale chunk in `chunks_path` exactly once and write the plan to `out_path`.

    Memory stays bounded as the corpus grows: stale inputs are spilled into on-disk buckets by
    input hash (so identical inputs meet in one bucket), about `bucket_rows` to a bucket, and
    each bucket is de-duplicated, sorted by length and packed on its own, then written out.
    Packing per bucket costs at most one part-filled batch per bucket.
    """
    import pyarrow as pa  # file I/O only: the packing above needs no pyarrow (GPU check)

    from batch_pipeline.spill import BucketSpill, bucket_count, hash_buckets, scratch_dir
    from batch_pipeline.staging import StageWriter, read_batches

    plan_schema = pa.schema(
        [
            pa.field("batch_index", pa.int32(), nullable=False),
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("input_text", pa.large_string(), nullable=False),
            pa.field("token_count", pa.int32(), nullable=False),
        ]
    )
    input_schema = pa.schema([f for f in plan_schema if f.name != "batch_index"])
    stale_rows = sum(
        batch["stale"].to_numpy(zero_copy_only=False).sum()
        for batch in read_batches(chunks_path, ["stale"], batch_rows=65536)
    )
    buckets = bucket_count(stale_rows, bucket_rows)
    summary = PlanSummary(
        token_budget=settings.token_budget, max_batch_size=settings.max_batch_size
    )
    with scratch_dir(out_path) as tmp:
        spill = BucketSpill(Path(tmp), "plan", input_schema)
        columns = ["input_hash", "input_text", "token_count", "stale"]
        for record_batch in read_batches(chunks_path, columns):
            stale = record_batch.filter(record_batch["stale"]).drop_columns(["stale"])
            spill.add(stale, hash_buckets(stale["input_hash"].to_pylist(), buckets))
        spill.close()
        with StageWriter(out_path, plan_schema) as out:
            for bucket in spill.buckets():
                inputs = spill.read(bucket)
                hashes = inputs["input_hash"].to_pylist()
                unique, batches, part = plan_inputs(
                    hashes, inputs["token_count"].to_pylist(), settings, model, dtype_bytes
                )
                order = [unique[i] for batch in batches for i in batch.indices]
                numbers = [
                    summary.batches + n for n, batch in enumerate(batches) for _ in batch.indices
                ]
                rows = inputs.take(pa.array(order, pa.int64()))
                out.write_table(rows.add_column(0, "batch_index", pa.array(numbers, pa.int32())))
                summary.inputs += part.inputs
                summary.duplicates_folded += part.duplicates_folded
                summary.batches += part.batches
                summary.real_tokens += part.real_tokens
                summary.padded_tokens += part.padded_tokens
                summary.batch_sizes += part.batch_sizes
                summary.largest_batch_bytes = max(
                    summary.largest_batch_bytes, part.largest_batch_bytes
                )
    return summary
