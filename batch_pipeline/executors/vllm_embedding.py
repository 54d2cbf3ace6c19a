"""The `vllm` and `vllm-run-batch` embedding executors: the embedding plan run on vLLM, in the
run's process (`LLM.embed`) or by vLLM's own `run-batch` in a subprocess, as a GPU pod runs
it, over the same OpenAI batch files the chat models' executors write (`/v1/embeddings`
lines, the inputs as the plan's token ids).

Both are embedders behind the one execute loop (`stages.execute`): the plan, the
checkpoints, the resume after a crash and the output are every embedding executor's. A
run-batch file of inputs is one subprocess (its engine's start included in the run's time)
and its vectors are checkpointed as the plan's batches come back; a request the engine wrote
a failure for is that input's failure, and one it wrote nothing for fails the run.
"""

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from batch_pipeline.executors import Capabilities
from batch_pipeline.executors.batch_file import (
    MAX_REQUESTS,
    embedding_request_line,
    read_results,
    write_batch_files,
)
from batch_pipeline.executors.embedding import EmbeddingExecutor
from batch_pipeline.executors.run_batch import (
    RUN_BATCH,
    RunBatchError,
    run_batch_environment,
    run_batch_file,
)
from batch_pipeline.inference.embedder import Embedder, PlannedBatch, RunStats
from batch_pipeline.inference.vllm_embedder import (
    EmbedEngineSettings,
    VllmEmbedder,
    embed_engine_settings,
    settings_problem,
)


def pooling_command(
    folder: Path,
    name: str,
    max_model_len: int,
    settings: EmbedEngineSettings,
    requests: Path,
    results: Path,
) -> list[str]:
    """The `run-batch` command line for a pooling model (an embedder, a reranker) at
    `folder`, served as `name`, on the embedding engines' settings."""
    command = [
        *RUN_BATCH,
        "-i",
        str(requests),
        "-o",
        str(results),
        "--model",
        str(folder),
        "--served-model-name",
        name,
        "--runner",
        "pooling",
        "--dtype",
        settings.dtype,
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--seed",
        "0",
    ]
    if settings.enforce_eager:
        command.append("--enforce-eager")
    if settings.device == "cuda":
        command += ["--gpu-memory-utilization", str(settings.gpu_memory_utilization)]
    return command


class RunBatchEmbedder(VllmEmbedder):
    """An `Embedder` whose engine is `vllm run-batch`: the planned batches, up to
    `max_requests` inputs at a time, as one batch file each (see the module docstring)."""

    backend = "vllm-run-batch"
    max_requests = MAX_REQUESTS

    def command(self, requests: Path, results: Path) -> list[str]:
        r = self.resolved
        return pooling_command(r.path, r.name, r.max_seq_length, self.settings, requests, results)

    def run(
        self, batches: Iterable[PlannedBatch], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        stats = stats if stats is not None else RunStats()
        group: list[tuple[list[int], list[list[int]]]] = []
        size = 0
        for batch in batches:
            ids = [list(i) for i in batch[2]] if len(batch) > 2 else self.token_ids(batch[1])
            if group and size + len(ids) > self.max_requests:
                yield from self._run_group(group, stats)
                group, size = [], 0
            group.append((list(batch[0]), ids))
            size += len(ids)
        if group:
            yield from self._run_group(group, stats)

    def _run_group(
        self, group: list[tuple[list[int], list[list[int]]]], stats: RunStats
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """One group of planned batches through run-batch; their vectors, batch by batch.
        The custom ids are the inputs' positions in the run."""
        normalize = self.resolved.normalize
        name = self.resolved.name
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="run-batch-embed-") as work:
            requests = (
                embedding_request_line(str(position), ids, name, normalize)
                for positions, batch_ids in group
                for position, ids in zip(positions, batch_ids, strict=True)
            )
            found = {}
            for path in write_batch_files(requests, Path(work)):
                results = path.with_name(path.name.replace("requests", "results"))
                env = run_batch_environment(self.settings.device, self.settings.kv_cache_gib)
                run_batch_file(self.command(path, results), env, results)
                found.update(read_results([results]))
        stats.seconds += time.perf_counter() - started  # each subprocess's engine start included
        for positions, batch_ids in group:
            kept, vectors = [], []
            for position, ids in zip(positions, batch_ids, strict=True):
                result = found.get(str(position))
                if result is None:
                    raise RunBatchError(f"vllm run-batch wrote no result for input {position}")
                if result.vector is None:
                    stats.failed[position] = result.error or "no vector"
                    continue
                kept.append(position)
                vectors.append(result.vector)
                stats.inputs += 1
                stats.tokens += len(ids)
                stats.padded_tokens += len(ids)
            stats.batches += 1
            if kept:
                yield kept, np.asarray(vectors, dtype=np.float32)


@dataclass(frozen=True)
class VllmEmbeddingExecutor(EmbeddingExecutor):
    """Embeds on vLLM's offline engine in the run's process; a device or dtype vLLM cannot
    run is a ConfigError naming the setting as its caller spells it, when the executor is
    chosen (before any stage runs)."""

    capabilities: ClassVar[Capabilities] = Capabilities(own_engine=True)  # vLLM's
    embedder: ClassVar[type[VllmEmbedder]] = VllmEmbedder
    settings_problem = staticmethod(settings_problem)

    def engine(self, load: Callable[[], Embedder]) -> Callable[[], Embedder]:
        return lambda: self.embedder(self.model, embed_engine_settings(self.device, self.dtype))


@dataclass(frozen=True)
class RunBatchEmbeddingExecutor(VllmEmbeddingExecutor):
    """Embeds through `vllm run-batch` in a subprocess, a batch file at a time."""

    embedder: ClassVar[type[VllmEmbedder]] = RunBatchEmbedder
