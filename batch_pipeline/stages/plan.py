"""Stage 3, the batch plan: every stale model input once, packed into batches.

Inputs are de-duplicated (identical inputs are embedded once), then sorted by token length and
packed under a padded-token budget by `batch_pipeline.inference.batching`. Each planned input
carries its token ids from prepare, so execute does not tokenise it again.
"""

import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from batch_pipeline.inference.batching import Batch, PlanSettings, activation_bytes, pack_batches
from batch_pipeline.inference.models import ResolvedModel


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
        """Counts always; padding and batch-size figures only when something was planned."""
        values: dict[str, object] = {
            "inputs_planned": self.inputs,
            "duplicates_folded": self.duplicates_folded,
            "batch_count": self.batches,
            "real_tokens": self.real_tokens,
            "padded_tokens": self.padded_tokens,
            "token_budget": self.token_budget,
            "max_batch_size": self.max_batch_size,
        }
        if self.batch_sizes:
            histogram = Counter(
                next(f"<={b}" for b in (1, 4, 16, 32, 64, 128, 256, 10**9) if s <= b)
                for s in self.batch_sizes
            )
            values.update(
                padding_efficiency=round(self.padding_efficiency, 4),
                batch_size_min=min(self.batch_sizes),
                batch_size_median=float(statistics.median(self.batch_sizes)),
                batch_size_max=max(self.batch_sizes),
                batch_size_histogram=dict(sorted(histogram.items())),
                largest_batch_estimated_mib=round(self.largest_batch_bytes / 2**20, 2),
            )
        return values


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

    started = time.perf_counter()
    from batch_pipeline.stages.columns import INPUT_IDS
    from batch_pipeline.state.spill import BucketSpill, bucket_count, hash_buckets, scratch_dir
    from batch_pipeline.state.staging import StageWriter, read_batches

    plan_schema = pa.schema(
        [
            pa.field("batch_index", pa.int32(), nullable=False),
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("input_text", pa.large_string(), nullable=False),
            pa.field("token_count", pa.int32(), nullable=False),
            INPUT_IDS,
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
        columns = [*input_schema.names, "stale"]
        for record_batch in read_batches(chunks_path, columns):
            stale = record_batch.filter(record_batch["stale"]).drop_columns(["stale"])
            spill.add(stale, hash_buckets(stale["input_hash"].to_pylist(), buckets))
        spill.close()
        with StageWriter(out_path, plan_schema, started) as out:
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
