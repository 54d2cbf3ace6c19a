"""The `spark` embedding executor: the plan's batches run as Spark tasks, where a team's data
platform already runs its CPU-bound batch inference.

The plan, its checkpoints, the resume after a crash and the output file are every embedding
executor's (`stages.execute`); what differs is the `Embedder` the checkpointed loop runs on,
`SparkEmbedder`. It takes the planned batches a job's worth at a time (`JOB_INPUTS` inputs),
makes them one DataFrame of (position, batch, token ids) cut into micro-partitions of whole
planned batches (about `TASK_INPUTS` inputs each, so a task's padding is the plan's), and
runs `mapInArrow` over it: each task embeds its micro-partition with the model, loaded once
per Spark Python worker (`spark.python.worker.reuse`) on torch in fp32 (the reference every
other path is held to), from the token ids the plan counted. The vectors come back by
position and are checkpointed batch by batch as the loop receives them.

The session is Spark's own: `SparkSession.builder.getOrCreate()` honours `spark.master` from
`spark-defaults.conf` (`SPARK_CONF_DIR`), `MASTER`, or Spark Connect's `SPARK_REMOTE`, so a
cluster (Databricks, EMR, Kubernetes) is pointed at as for any PySpark job; with none set it
runs in local mode on this machine's cores (`local[*]`). Every Spark executor needs the
model's folder at the same path (a shared volume, or the image), and this package installed.
"""

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from batch_pipeline.executors import Capabilities
from batch_pipeline.executors.embedding import EmbeddingExecutor
from batch_pipeline.inference.embedder import Embedder, PlannedBatch, RunStats
from batch_pipeline.inference.models import ResolvedModel

JOB_INPUTS = 16384  # inputs per Spark job: what the driver holds, and a checkpoint's worth
TASK_INPUTS = 1024  # inputs per task (micro-partition), of whole planned batches
LOCAL_MASTER = "local[*]"  # where no spark.master is configured
TASK_THREADS_ENV = "BATCH_PIPELINE_SPARK_TASK_THREADS"  # torch threads per task (default 1)
_WORKER_MODELS: dict[str, object] = {}  # a Python worker's loaded model, by folder


def _worker_runner(model: ResolvedModel, threads: int) -> tuple[object, bool]:
    """The model on this Spark Python worker, loaded on its first task (fp32 torch), and
    whether this call loaded it. Module-level, so the task's function (pickled by value)
    finds the worker's cache, not a copy of it."""
    key = str(model.path)
    loaded = key not in _WORKER_MODELS
    if loaded:
        from batch_pipeline.inference.runner import EmbeddingRunner

        _WORKER_MODELS[key] = EmbeddingRunner(
            model, device="cpu", dtype="float32", backend="torch", num_threads=threads
        )
    return _WORKER_MODELS[key], loaded


def embed_partition(model: ResolvedModel, threads: int):  # noqa: ANN201
    """The function each Spark task runs over its micro-partition's Arrow batches: each
    planned batch in it embedded as planned, its vectors by position, whether this task
    loaded the model (its worker's first) and which worker ran it."""

    def run(batches: Iterator) -> Iterator:  # noqa: ANN001 - pyarrow RecordBatches
        import pyarrow as pa

        runner, loaded = _worker_runner(model, threads)
        planned: dict[int, tuple[list[int], list[str], list[list[int]]]] = {}
        for record_batch in batches:
            columns = record_batch.to_pydict()
            for position, batch, text, ids in zip(
                columns["position"], columns["batch"], columns["text"], columns["ids"], strict=True
            ):
                positions, texts, token_ids = planned.setdefault(batch, ([], [], []))
                positions.append(position)
                texts.append(text)
                token_ids.append(ids)
        for batch in sorted(planned):
            for done, vectors in runner.run([planned[batch]]):
                width = vectors.shape[1]
                offsets = pa.array(range(0, (len(done) + 1) * width, width), pa.int32())
                flat = pa.array(vectors.reshape(-1), pa.float32())
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array(done, pa.int64()),
                        pa.ListArray.from_arrays(offsets, flat),
                        pa.array([loaded] + [False] * (len(done) - 1)),  # one row says
                        pa.array([os.getpid()] * len(done), pa.int64()),
                    ],
                    names=["position", "vector", "loaded", "worker"],
                )
                loaded = False

    return run


class SparkEmbedder:
    """An `Embedder` whose batches run as Spark tasks (see the module docstring)."""

    backend = "spark"
    device = "cpu"  # the Spark workers': priced as the run's CPU
    dtype = "float32"
    calibrating = False
    job_inputs = JOB_INPUTS
    task_inputs = TASK_INPUTS

    def __init__(self, model: ResolvedModel) -> None:
        self.resolved = model
        self.dimension = model.embedding_dimension
        self.model_loads = 0  # models loaded by the Spark workers, all jobs together
        self.tasks = 0  # Spark tasks run, all jobs together
        self.workers: set[int] = set()  # the Python workers (processes) that ran them
        self._session = None

    def calibrate(self, texts: list[str]) -> None:
        return None

    @property
    def session(self):  # noqa: ANN201 - a SparkSession
        """Spark's session: the configured master or Spark Connect, else local mode."""
        if self._session is None:
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.appName("batch-pipeline").config(
                "spark.ui.showConsoleProgress",
                "false",  # the run reports its own progress
            )
            configured = os.environ.get("MASTER") or os.environ.get("SPARK_REMOTE")
            if not configured and not _configured_master():
                builder = builder.master(LOCAL_MASTER)
            self._session = builder.getOrCreate()
        return self._session

    def run(
        self, batches: Iterable[PlannedBatch], stats: RunStats | None = None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        stats = stats if stats is not None else RunStats()
        group: list[tuple[list[int], list[str], list[list[int]]]] = []
        size = 0
        for batch in batches:
            if len(batch) < 3:
                raise ValueError("the spark executor runs planned batches, with their token ids")
            ids = [list(i) for i in batch[2]]
            if group and size + len(ids) > self.job_inputs:
                yield from self._job(group, stats)
                group, size = [], 0
            group.append((list(batch[0]), list(batch[1]), ids))
            size += len(ids)
        if group:
            yield from self._job(group, stats)

    def _job(
        self, group: list[tuple[list[int], list[str], list[list[int]]]], stats: RunStats
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """One Spark job over a group of planned batches; their vectors, batch by batch."""
        import pyarrow as pa

        started = time.perf_counter()
        tasks, filled = 0, 0
        positions, numbers, texts, ids, task = [], [], [], [], []
        for number, (batch_positions, batch_texts, batch_ids) in enumerate(group):
            if not tasks or filled + len(batch_ids) > self.task_inputs:
                tasks, filled = tasks + 1, 0  # a new micro-partition, of whole batches
            filled += len(batch_ids)
            positions += batch_positions
            numbers += [number] * len(batch_ids)
            texts += batch_texts
            ids += batch_ids
            task += [tasks - 1] * len(batch_ids)
        table = pa.table(
            {"position": positions, "batch": numbers, "text": texts, "ids": ids, "task": task}
        )
        frame = self.session.createDataFrame(table).repartition(tasks, "task")
        threads = max(1, int(os.environ.get(TASK_THREADS_ENV, "1")))
        schema = "position long, vector array<float>, loaded boolean, worker long"
        answered = frame.select("position", "batch", "text", "ids").mapInArrow(
            embed_partition(self.resolved, threads), schema
        )
        result = answered.toArrow()
        stats.seconds += time.perf_counter() - started  # the job's scheduling included
        self.tasks += tasks
        self.model_loads += sum(result["loaded"].to_pylist())
        self.workers |= set(result["worker"].to_pylist())
        vectors = dict(
            zip(
                result["position"].to_pylist(),
                np.asarray(result["vector"].to_pylist(), dtype=np.float32),
                strict=True,
            )
        )
        for batch_positions, _texts, batch_ids in group:
            missing = [p for p in batch_positions if p not in vectors]
            if missing:
                raise RuntimeError(f"the Spark job returned no vector for input {missing[0]}")
            stats.inputs += len(batch_positions)
            stats.tokens += sum(len(i) for i in batch_ids)
            stats.padded_tokens += len(batch_ids) * max(len(i) for i in batch_ids)
            stats.batches += 1
            yield batch_positions, np.stack([vectors[p] for p in batch_positions])


def _configured_master() -> bool:
    """Whether Spark's own configuration (spark-defaults.conf) names a master."""
    folder = os.environ.get("SPARK_CONF_DIR")
    if not folder:
        return False
    defaults = os.path.join(folder, "spark-defaults.conf")
    if not os.path.exists(defaults):
        return False
    with open(defaults, encoding="utf-8") as lines:
        return any(line.split()[:1] == ["spark.master"] for line in lines)


def spark_settings_problem(device: str, dtype: str) -> tuple[str, str] | None:
    """The Spark workers embed on their CPUs in fp32, the reference every path is held to."""
    if device not in ("auto", "cpu"):
        return "device", f"{device!r}: the spark executor embeds on the Spark workers' CPUs"
    if dtype not in ("auto", "float32"):
        return "dtype", f"{dtype!r}: the spark executor embeds in float32"
    return None


@dataclass(frozen=True)
class SparkEmbeddingExecutor(EmbeddingExecutor):
    """Embeds the plan as Spark tasks (see the module docstring)."""

    # its engines are the Spark workers', not the run's
    capabilities: ClassVar[Capabilities] = Capabilities(own_engine=True)
    settings_problem = staticmethod(spark_settings_problem)

    def engine(self, load: Callable[[], Embedder]) -> Callable[[], Embedder]:
        return lambda: SparkEmbedder(self.model)
