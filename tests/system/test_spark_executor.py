"""The `spark` embedding executor on Spark in local mode (`local[2]`, two Python workers): the
plan's batches run as Spark tasks on micro-partitions of whole planned batches, the model
loaded once per worker, and the vectors land as the in-process executor's (fp32 torch both,
cosine 0.9999), whatever order the tasks finish in; a run cut off after a checkpoint resumes
from it, and a rerun embeds nothing. Needs Java 17 (Debian's openjdk-17-jre-headless, which
`make setup` installs where it is missing)."""

import numpy as np
import pytest

from batch_pipeline.config import ConfigError, ModelConfig, load_config
from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
from batch_pipeline.executors import spark_embedding as spark
from batch_pipeline.executors.embedding import embedding_executor
from batch_pipeline.index.product import open_partition
from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.inference.models import resolve_model
from batch_pipeline.runs.request import RunRequest
from batch_pipeline.stages import checkpointed
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import many_articles

SMALL = ExecuteOptions(PlanSettings(max_batch_size=4))  # many batches from a small corpus


@pytest.fixture(scope="module")
def spark_session():
    """One local-mode session for the module (its start is Spark's, not the executor's)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("batch-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture()
def made(spark_session, monkeypatch):
    """The SparkEmbedders the runs make, on the module's session, two planned batches a task
    and four a job (so a small corpus runs several jobs of several tasks)."""
    embedders: list[spark.SparkEmbedder] = []

    class Small(spark.SparkEmbedder):
        job_inputs, task_inputs = 16, 8

        def __init__(self, model) -> None:  # noqa: ANN001
            super().__init__(model)
            self._session = spark_session
            embedders.append(self)

    monkeypatch.setattr(spark, "SparkEmbedder", Small)
    return embedders


@pytest.fixture()
def corpus(tmp_path):
    many_articles(tmp_path / "docs", count=10)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: handbook\n    source: {kind: filesystem, path: docs}\n"
    )
    return config


def opened(config, home, executor):  # noqa: ANN001, ANN201
    storage = resolve_storage(str(home))
    return open_partition(
        load_config(config),
        storage,
        "handbook",
        TrackingStore(storage.tracking_url),
        VectorStore(storage.lancedb_uri),
        execution=ExecutorChoice(name=executor, device="cpu", dtype="float32"),
    )


def run(partition, run_id: str, load, options: ExecuteOptions = SMALL):  # noqa: ANN001, ANN201
    """The run's stages one by one, on small planned batches; execute's summary."""
    collected = partition.collect(run_id)
    chunks = partition.prepare(run_id, collected.path)
    plan = partition.plan(run_id, chunks.path, SMALL)
    executed = partition.execute(run_id, plan.path, load, options)
    partition.land_stage(RunRequest(run_id), collected.path, chunks.path, executed.path)
    return executed.summary


def vectors(partition) -> dict[str, np.ndarray]:  # noqa: ANN001
    table = partition.store.open(partition.index).to_arrow().to_pylist()
    return {row["chunk_id"]: np.asarray(row["vector"]) for row in table}


def test_spark_tasks_land_the_in_process_vectors_with_one_model_load_per_worker(
    made, corpus, tmp_path, runner
):
    from batch_pipeline.inference.runner import EmbeddingRunner

    local = opened(corpus, tmp_path / "local", "local")
    reference = EmbeddingRunner(runner.resolved, device="cpu", dtype="float32", backend="torch")
    run(local, "run-local", lambda: reference)
    on_spark = opened(corpus, tmp_path / "spark", "spark")
    assert on_spark.index == local.index  # the same generation: same model, same plan
    summary = run(on_spark, "run-1", lambda: pytest.fail("spark loads no model in the run"))
    ours, theirs = vectors(on_spark), vectors(local)
    assert ours.keys() == theirs.keys() and len(ours) > 16
    for chunk_id, vector in ours.items():
        other = theirs[chunk_id]
        assert float(vector @ other / np.linalg.norm(vector) / np.linalg.norm(other)) >= 0.9999
    (embedder,) = made
    assert embedder.tasks > 2 * 2  # more tasks than cores, over more than one job
    # the model loaded at most once per Python worker (a worker Spark forks from one that
    # has it loaded has it too), and the workers ran several tasks each
    assert 1 <= embedder.model_loads <= len(embedder.workers) < embedder.tasks
    assert summary.backend == "spark" and summary.stats.inputs == len(ours)
    assert summary.stats.batches > embedder.tasks  # a task runs whole planned batches
    again = opened(corpus, tmp_path / "spark", "spark")
    assert run(again, "run-2", lambda: None).stats.inputs == 0  # nothing stale: nothing runs
    assert len(made) == 1  # and no job was started


def test_a_spark_run_cut_off_after_a_checkpoint_resumes_from_it(
    made, corpus, tmp_path, monkeypatch
):
    class Crash(BaseException):
        pass

    def crash(stage: str, count: int) -> None:
        if stage == "execute" and count == 3:
            raise Crash  # as a SIGKILL after the third checkpoint

    monkeypatch.setattr(checkpointed, "crash_point", crash)
    every = ExecuteOptions(SMALL.plan, checkpoint_every=1)
    with pytest.raises(Crash):
        run(opened(corpus, tmp_path / "home", "spark"), "run-1", None, every)
    monkeypatch.setattr(checkpointed, "crash_point", lambda stage, count: None)
    again = opened(corpus, tmp_path / "home", "spark")
    summary = run(again, "run-2", None, every)
    assert summary.resumed_inputs > 0 and summary.stats.inputs > 0  # only the rest ran
    assert len(vectors(again)) == summary.resumed_inputs + summary.stats.inputs


@pytest.mark.parametrize(
    "setting, said", [({"device": "cuda"}, "device"), ({"dtype": "bfloat16"}, "dtype")]
)
def test_settings_the_spark_workers_cannot_run_fail_when_the_executor_is_chosen(setting, said):
    choice = ExecutorChoice(name="spark", **setting, spelled=lambda s: f"--{s}")
    with pytest.raises(ConfigError, match=f"^--{said}: .*spark executor"):
        embedding_executor(resolve_model(ModelConfig()), choice)
