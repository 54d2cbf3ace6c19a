"""Stage 4, execute: run the batch plan and stream the vectors to staging.

The output holds one row per planned input (`input_hash`, `vector`, `embedded_at`); inputs that
failed on their own are listed in the summary with their reason instead.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from batch_pipeline.inference import EmbeddingRunner, RunStats
from batch_pipeline.staging import StageWriter, read_batches, row_count


def embeddings_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("input_hash", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("embedded_at", pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )


@dataclass
class ExecuteSummary:
    stats: RunStats
    device: str
    dtype: str
    dimension: int
    failed_inputs: dict[str, str] = field(default_factory=dict)  # input_hash -> reason

    def metadata(self) -> dict[str, object]:
        s = self.stats
        return {
            "chunks_embedded": s.inputs,
            "inputs_failed": len(self.failed_inputs),
            "tokens": s.tokens,
            "padded_tokens": s.padded_tokens,
            "padding_efficiency": round(s.tokens / s.padded_tokens, 4) if s.padded_tokens else 1.0,
            "batches_run": s.batches,
            "seconds": round(s.seconds, 3),
            "tokens_per_second": round(s.tokens_per_second, 1),
            "oom_splits": s.oom_splits,
            "device": self.device,
            "dtype": self.dtype,
            "embedding_dimension": self.dimension,
        }


def _planned_batches(plan_path: Path) -> Iterator[tuple[list[str], list[str]]]:
    """(input hashes, input texts) per planned batch, streamed in plan order."""
    hashes: list[str] = []
    texts: list[str] = []
    current = None
    for record_batch in read_batches(plan_path, ["batch_index", "input_hash", "input_text"]):
        columns = record_batch.to_pydict()
        for index, key, text in zip(
            columns["batch_index"], columns["input_hash"], columns["input_text"], strict=True
        ):
            if index != current and hashes:
                yield hashes, texts
                hashes, texts = [], []
            current = index
            hashes.append(key)
            texts.append(text)
    if hashes:
        yield hashes, texts


def execute_plan(
    plan_path: Path, out_path: Path, get_runner: Callable[[], EmbeddingRunner], dimension: int
) -> ExecuteSummary:
    """Embed the plan; an empty plan writes an empty file without loading the model."""
    stats = RunStats()
    if row_count(plan_path) == 0:
        with StageWriter(out_path, embeddings_schema(dimension)):
            pass
        return ExecuteSummary(
            stats=stats, device="none (nothing to embed)", dtype="none", dimension=dimension
        )
    runner = get_runner()
    if runner.dimension != dimension:
        raise RuntimeError(
            f"the loaded model embeds into {runner.dimension} dimensions, its files say {dimension}"
        )
    keys: list[str] = []  # input hash by position in the plan

    def batches() -> Iterator[tuple[list[int], list[str]]]:
        for hashes, texts in _planned_batches(plan_path):
            start = len(keys)
            keys.extend(hashes)
            yield list(range(start, start + len(hashes))), texts

    with StageWriter(out_path, embeddings_schema(runner.dimension)) as writer:
        for positions, vectors in runner.run(batches(), stats):
            now = datetime.now(UTC)
            writer.write_table(
                pa.table(
                    {
                        "input_hash": [keys[p] for p in positions],
                        "vector": pa.FixedSizeListArray.from_arrays(
                            pa.array(vectors.reshape(-1)), runner.dimension
                        ),
                        "embedded_at": pa.array([now] * len(positions), pa.timestamp("us", "UTC")),
                    }
                )
            )
    return ExecuteSummary(
        stats=stats,
        device=runner.device,
        dtype=runner.dtype,
        dimension=runner.dimension,
        failed_inputs={keys[p]: reason for p, reason in stats.failed.items()},
    )
