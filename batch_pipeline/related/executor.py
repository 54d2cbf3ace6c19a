"""Related documents' executor without a reranker: plan keeps each stale candidate pair once,
execute keeps its candidate score (hybrid search's fused score of its best chunk). It runs no
model, so it never calls `load`; its scores go through the frame's checkpointed output
(`stages.checkpointed`) in the score family's schema, as a reranker's would."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import pyarrow as pa

from batch_pipeline.executors import Capabilities, ExecuteOptions
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.stages.score import SCORES_SCHEMA, ScorePlanSummary, ScoreSummary
from batch_pipeline.state.staging import StagePath, StageWriter, read_batches, read_table

PLANNED = pa.schema([("input_hash", pa.string()), ("candidate_score", pa.float32())])
CANDIDATES = "candidates"  # what scored the pairs, where no reranker did


@dataclass(frozen=True)
class CandidateScores:
    """Keeps each candidate pair's own score (see the module docstring)."""

    capabilities: ClassVar[Capabilities] = Capabilities()  # runs no model

    def plan(
        self, prepared: StagePath, out: StagePath, options: ExecuteOptions
    ) -> ScorePlanSummary:
        started = time.perf_counter()
        scores: dict[str, float] = {}
        for batch in read_batches(prepared, ["input_hash", "candidate_score"]):
            scores.update(
                zip(
                    batch["input_hash"].to_pylist(),
                    batch["candidate_score"].to_pylist(),
                    strict=True,
                )
            )
        with StageWriter(out, PLANNED, started) as writer:
            writer.write_table(
                pa.table(
                    {"input_hash": list(scores), "candidate_score": list(scores.values())}, PLANNED
                )
            )
        return ScorePlanSummary(pairs=len(scores), batches=1 if scores else 0)

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], Any],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> ScoreSummary:
        started = time.perf_counter()
        rows = read_table(planned, ["input_hash", "candidate_score"]).to_pylist()
        summary = ScoreSummary(backend=CANDIDATES)
        with CheckpointedOutput(out, checkpoints, SCORES_SCHEMA, started=started) as output:
            done = output.resume({r["input_hash"] for r in rows} & output.done_keys)
            todo = [r for r in rows if r["input_hash"] not in done]
            now = datetime.now(UTC)
            output.add(
                pa.table(
                    {
                        "input_hash": [r["input_hash"] for r in todo],
                        "score": pa.array([r["candidate_score"] for r in todo], pa.float32()),
                        "scored_at": pa.array([now] * len(todo), SCORES_SCHEMA[2].type),
                    },
                    SCORES_SCHEMA,
                )
            )
            summary.resumed_inputs = len(done)
            summary.stats.pairs = len(todo)
            summary.stats.seconds = time.perf_counter() - started
            output.finish(summary, planned, device="cpu" if todo else None)
        return summary
