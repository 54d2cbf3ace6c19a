"""Plan and execute for the score family: (query, document) pairs scored by a reranker.

A product's prepare writes the pairs to score (`input_hash`, `query`, `document`: the hash is
the pair's staleness key). The plan takes every pair once (identical pairs meet in one on-disk
bucket by hash and are folded), counts its tokens with the reranker's tokenizer (the pair as
the reranker encodes it, cut at its length), and packs each bucket under the padded-token
budget, shortest first (`inference.batching`). Memory holds one bucket.

Execute streams the plan's batches through a `Scorer` (`run`: each batch scored as planned;
a scorer whose engine starts per call, as `vllm run-batch` does, takes many at once),
writing (`input_hash`, `score`, `scored_at`) through the checkpointed output every executor
writes through (`stages.checkpointed`): a rerun resumes from the checkpoints, and an empty
plan loads no model.
"""

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from batch_pipeline.inference.batching import PlanSettings, pack_batches
from batch_pipeline.inference.scorer import Scorer, ScoreStats
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages.checkpointed import (
    DEFAULT_CHECKPOINT_EVERY,
    CheckpointedOutput,
    CheckpointedRun,
    execute_checkpointed,
)
from batch_pipeline.stages.outcome import ExecuteOutcome
from batch_pipeline.state.spill import BucketSpill, bucket_count, hash_buckets, scratch_dir
from batch_pipeline.state.staging import StagePath, StageWriter, read_batches, read_groups

PAIRS_SCHEMA = pa.schema(
    [
        pa.field("input_hash", pa.string(), nullable=False),
        pa.field("query", pa.large_string(), nullable=False),
        pa.field("document", pa.large_string(), nullable=False),
    ]
)
PLAN_SCHEMA = pa.schema(
    [
        pa.field("batch_index", pa.int32(), nullable=False),
        *PAIRS_SCHEMA,
        pa.field("token_count", pa.int32(), nullable=False),
    ]
)
SCORES_SCHEMA = pa.schema(
    [
        pa.field("input_hash", pa.string(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
        pa.field("scored_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


@dataclass
class ScorePlanSummary:
    pairs: int = 0
    duplicates_folded: int = 0
    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    token_budget: int = 0

    def metadata(self) -> dict[str, object]:
        return {
            "pairs_planned": self.pairs,
            "duplicates_folded": self.duplicates_folded,
            "batch_count": self.batches,
            "real_tokens": self.real_tokens,
            "padded_tokens": self.padded_tokens,
            "token_budget": self.token_budget,
        }


def plan_pairs(
    pairs_path: StagePath | Path,
    out_path: StagePath | Path,
    token_counts: Callable[[list[tuple[str, str]]], list[int]],
    settings: PlanSettings,
    bucket_rows: int = 16384,
) -> ScorePlanSummary:
    """Every pair of `pairs_path` once, counted by `token_counts` and packed, into `out_path`
    (see the module docstring)."""
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in read_batches(pairs_path, ["input_hash"]))
    buckets = bucket_count(rows, bucket_rows)
    summary = ScorePlanSummary(token_budget=settings.token_budget)
    with scratch_dir(out_path) as tmp:
        spill = BucketSpill(Path(tmp), "pairs", PAIRS_SCHEMA)
        for batch in read_batches(pairs_path, PAIRS_SCHEMA.names):
            spill.add(batch, hash_buckets(batch["input_hash"].to_pylist(), buckets))
        spill.close()
        with StageWriter(out_path, PLAN_SCHEMA, started) as out:
            for bucket in spill.buckets():
                pairs = spill.read(bucket)
                first: dict[str, int] = {}
                for i, key in enumerate(pairs["input_hash"].to_pylist()):
                    first.setdefault(key, i)
                unique = pairs.take(pa.array(sorted(first.values()), pa.int64()))
                texts = list(
                    zip(unique["query"].to_pylist(), unique["document"].to_pylist(), strict=True)
                )
                counts = token_counts(texts)
                packed = pack_batches(counts, settings)
                order = [i for batch in packed for i in batch.indices]
                numbers = [summary.batches + n for n, b in enumerate(packed) for _ in b.indices]
                table = unique.take(pa.array(order, pa.int64()))
                table = table.add_column(0, "batch_index", pa.array(numbers, pa.int32()))
                table = table.append_column(
                    "token_count", pa.array([counts[i] for i in order], pa.int32())
                )
                out.write_table(table)
                summary.pairs += unique.num_rows
                summary.duplicates_folded += pairs.num_rows - unique.num_rows
                summary.batches += len(packed)
                summary.real_tokens += sum(counts)
                summary.padded_tokens += sum(b.padded_tokens for b in packed)
    return summary


@dataclass
class ScoreSummary(ExecuteOutcome):
    """What a score execute did: the scorer's counts, what it resumed, what ran it, and,
    on a provider (`openai-batch`), its batches, prices, failures and unanswered pairs."""

    stats: ScoreStats = field(default_factory=ScoreStats)
    backend: str = "none"  # nothing to score: no model was loaded
    device: str | None = None  # where the scorer ran (a provider's: priced by tokens)
    load_seconds: float = 0.0

    @property
    def token_cost(self) -> float | None:
        """What a provider bills for the pairs' input tokens (one output token each)."""
        if self.token_prices is None:
            return None
        s = self.stats
        return (s.tokens * self.token_prices[0] + s.pairs * self.token_prices[1]) / 1_000_000

    def record(self) -> dict[str, object]:
        """What land needs to measure the run, written into the output file's footer."""
        s = self.stats
        return {
            "inputs": s.pairs,
            "tokens": s.tokens,
            "seconds": s.seconds,
            "fixed_seconds": self.load_seconds,
            "inputs_resumed": self.resumed_inputs,
            "inputs_failed": len(self.failed_inputs),
            "backend": self.backend if s.pairs else None,
            "device": self.device if s.pairs else None,
            "failed": self.failed_inputs,
            "inputs_unanswered": self.unanswered,
            "executor": self.executor,
            "token_cost": self.token_cost,
            "window_seconds": self.window_seconds,
            **self.batches.record(),
        }

    def metadata(self) -> dict[str, object]:
        s = self.stats
        values: dict[str, object] = {
            "pairs_scored": s.pairs,
            "inputs_resumed_from_checkpoint": self.resumed_inputs,
            "batches_run": s.batches,
            **self.batches.metadata(),
        }
        if self.failed_inputs:
            values["pairs_failed"] = len(self.failed_inputs)
        if self.unanswered:
            values["pairs_unanswered"] = self.unanswered
        if self.token_cost is not None:
            values["token_cost"] = round(self.token_cost, 6)
        if s.pairs:
            values.update(
                seconds=round(s.seconds, 3),
                pairs_per_second=round(s.pairs_per_second, 1),
                model_load_seconds=round(self.load_seconds, 3),
                backend=self.backend,
            )
        return values


def execute_pairs(
    plan_path: StagePath | Path,
    out_path: StagePath | Path,
    get_scorer: Callable[[], Scorer],
    checkpoint_dir: StagePath | Path | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    progress: ProgressSink | None = None,
    progress_interval: float = 15.0,
) -> ScoreSummary:
    """Score the plan into `out_path`, a batch at a time (see the module docstring)."""
    family = PairRun(get_scorer, checkpoint_every)
    return execute_checkpointed(
        family, plan_path, out_path, checkpoint_dir, progress, progress_interval
    )


class PairRun(CheckpointedRun):
    """The score family's step in the checkpointed loop: the plan's batches of pairs through a
    `Scorer`, its scores as rows."""

    rows, unit = SCORES_SCHEMA, "pairs"

    def __init__(self, get_scorer: Callable[[], Scorer], every: int) -> None:
        self.get_scorer, self.every = get_scorer, every

    def start(self, plan_path: StagePath | Path) -> ScoreSummary:
        return ScoreSummary()

    def planned(self, plan_path: StagePath | Path) -> Iterator[tuple[str, int]]:
        for batch in read_batches(plan_path, ["input_hash"]):
            yield from ((key, 0) for key in batch["input_hash"].to_pylist())

    def run(
        self,
        plan_path: StagePath | Path,
        output: CheckpointedOutput,
        done: set[str],
        summary: ScoreSummary,
        progress: Progress,
    ) -> None:
        scorer = self.get_scorer()
        progress.working()
        columns = ["input_hash", "query", "document", "token_count"]
        waiting: deque[list[tuple]] = deque()  # planned batches handed to the scorer

        def batches() -> Iterator[list[tuple[str, str]]]:
            for group in read_groups(plan_path, "batch_index", columns):
                pending = [row for row in group if row[0] not in done]
                if pending:
                    waiting.append(pending)
                    yield [(q, d) for _, q, d, _ in pending]

        began = time.perf_counter()
        for scores in scorer.run(batches()):  # a scorer may take several batches at once
            pending = waiting.popleft()
            stats = summary.stats
            stats.seconds += time.perf_counter() - began
            stats.pairs += len(pending)
            stats.tokens += sum(count for *_, count in pending)
            stats.padded_tokens += len(pending) * max(count for *_, count in pending)
            stats.batches += 1
            now = datetime.now(UTC)
            output.add(
                pa.table(
                    {
                        "input_hash": [row[0] for row in pending],
                        "score": pa.array(scores, pa.float32()),
                        "scored_at": pa.array([now] * len(pending), SCORES_SCHEMA[2].type),
                    },
                    schema=SCORES_SCHEMA,
                )
            )
            progress.advance(len(pending), 0)
            began = time.perf_counter()
        summary.backend, summary.device = scorer.backend, scorer.device
        summary.load_seconds = scorer.load_seconds
