"""Executors by name, for every model family (`executors.registry`): each registered
executor imports and plans and runs as its family does; a name its family lacks fails in one
line; and the `vllm-run-batch` embedder joins run-batch's results back to the plan's inputs,
an input the engine refused being that input's failure and one it wrote nothing for failing
the run. (The real engines' vectors are compared in tests/system/test_embedding_executors.)"""

import json
from dataclasses import replace

import pytest

from batch_pipeline.config import ChunkingConfig, ConfigError, ModelConfig
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors import vllm_embedding as run_batch_embedding
from batch_pipeline.executors.batch_api import BatchApiSettings
from batch_pipeline.executors.embedding import EmbeddingExecutor, embedding_executor
from batch_pipeline.executors.registry import (
    EMBED,
    EXECUTORS,
    GENERATE,
    SCORE,
    check_executor,
    default_executor,
    executor_class,
)
from batch_pipeline.executors.run_batch import RunBatchError
from batch_pipeline.executors.scoring import ScoreExecutor
from batch_pipeline.executors.vllm_embedding import RunBatchEmbedder, VllmEmbeddingExecutor
from batch_pipeline.inference.embedder import RunStats
from batch_pipeline.inference.fingerprint import model_fingerprint
from batch_pipeline.inference.models import resolve_model
from batch_pipeline.inference.vllm_embedder import EmbedEngineSettings, embed_engine_settings
from tests.support import REPO


@pytest.mark.parametrize(
    ("family", "name"), [(f, n) for f, names in EXECUTORS.items() for n in names]
)
def test_every_registered_executor_plans_and_executes_as_its_family_does(family, name):
    chosen = executor_class(family, name)
    assert callable(chosen.plan) and callable(chosen.execute)
    if family == EMBED:
        assert issubclass(chosen, EmbeddingExecutor)
    if family == SCORE:
        assert issubclass(chosen, ScoreExecutor)


def test_a_name_its_family_lacks_fails_in_one_line_naming_the_familys_executors():
    assert default_executor(EMBED) == "local" and default_executor(GENERATE) == "vllm"
    assert check_executor(EMBED, None) == "local"
    with pytest.raises(ConfigError) as refused:
        check_executor(GENERATE, "local", "--executor")
    assert str(refused.value) == (
        "--executor 'local' runs no generate model; generate executors: vllm, "
        "vllm-run-batch, openai-batch, anthropic-batch"
    )
    with pytest.raises(ConfigError, match="unknown model family 'rank'"):
        check_executor("rank", "local")


def test_the_choice_names_the_embedding_executor_and_its_engine_settings():
    model = resolve_model(ModelConfig())
    assert type(embedding_executor(model, None)) is EmbeddingExecutor
    chosen = embedding_executor(model, ExecutorChoice(name="vllm", device="cpu", dtype="float32"))
    assert isinstance(chosen, VllmEmbeddingExecutor) and chosen.device == "cpu"
    assert embed_engine_settings("cpu", "auto").dtype == "float32"  # the local reference's
    with pytest.raises(ValueError, match="int8 runs on the local executor"):
        embed_engine_settings("cpu", "int8")
    with pytest.raises(ValueError, match="device mps does not run vLLM"):
        embed_engine_settings("mps", "auto")


@pytest.mark.parametrize("name", ["vllm", "vllm-run-batch"])
def test_settings_vllm_cannot_run_fail_when_the_executor_is_chosen(name):
    """Before any stage runs, and spelled as the caller spells the setting."""
    model = resolve_model(ModelConfig())
    flags = ExecutorChoice(name=name, dtype="int8", spelled=lambda s: f"--{s}")
    with pytest.raises(ConfigError, match=r"^--dtype: 'int8' does not run on vLLM"):
        embedding_executor(model, flags)
    with pytest.raises(ConfigError, match=r"^device: mps does not run vLLM"):
        embedding_executor(model, ExecutorChoice(name=name, device="mps"))
    assert embedding_executor(model, ExecutorChoice(name="local", dtype="int8")).dtype == "int8"


def fake_run_batch(refuse: set[str], drop: set[str], calls: list[int]):  # noqa: ANN201
    """FAULT INJECTION, a stand-in for `vllm run-batch`: answers each request of the file with
    a vector of its token count, refuses the custom ids in `refuse` (a 400) and writes no line
    for those in `drop`."""

    def run(command: list[str], env: dict[str, str], results) -> None:  # noqa: ANN001
        requests = command[command.index("-i") + 1]
        lines = []
        with open(requests, encoding="utf-8") as file:
            for line in file:
                request = json.loads(line)
                key, ids = request["custom_id"], request["body"]["input"]
                if key in drop:
                    continue
                if key in refuse:
                    response = {"status_code": 400, "body": {"error": {"message": "refused"}}}
                else:
                    vector = [float(len(ids))] + [0.0] * 383
                    response = {"status_code": 200, "body": {"data": [{"embedding": vector}]}}
                lines.append(json.dumps({"custom_id": key, "response": response}) + "\n")
        calls.append(len(lines))
        results.write_text("".join(lines), encoding="utf-8")

    return run


def batches(sizes: list[int]):  # noqa: ANN201
    position = 0
    for size in sizes:
        positions = list(range(position, position + size))
        position += size
        yield (
            positions,
            [f"text {p}" for p in positions],
            [[101] + [7] * p + [102] for p in positions],
        )


def test_run_batch_embeds_a_file_at_a_time_and_joins_each_vector_to_its_input(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(run_batch_embedding, "run_batch_file", fake_run_batch({"3"}, set(), calls))
    embedder = RunBatchEmbedder(resolve_model(ModelConfig()), EmbedEngineSettings())
    embedder.max_requests = 4  # two planned batches of two to a file
    stats = RunStats()
    out = list(embedder.run(batches([2, 2, 2]), stats))
    assert calls == [4, 2]  # two subprocesses: the plan's inputs in files of at most four
    assert [positions for positions, _ in out] == [[0, 1], [2], [4, 5]]  # 3 was refused
    for positions, vectors in out:
        assert vectors.shape == (len(positions), 384)
        assert vectors[:, 0].tolist() == [p + 2 for p in positions]  # its own input's vector
    assert stats.failed == {3: "status 400; refused"}
    assert stats.inputs == 5 and stats.batches == 3


def test_an_input_run_batch_wrote_nothing_for_fails_the_run(monkeypatch):
    monkeypatch.setattr(run_batch_embedding, "run_batch_file", fake_run_batch(set(), {"1"}, []))
    embedder = RunBatchEmbedder(resolve_model(ModelConfig()), EmbedEngineSettings())
    with pytest.raises(RunBatchError, match="wrote no result for input 1"):
        list(embedder.run(batches([2])))


@pytest.mark.parametrize("name", ["local", "vllm", "vllm-run-batch"])
def test_every_embedding_kind_runs_its_plan_on_the_executor_the_choice_names(name, tmp_path):
    """`run --executor NAME` and the inference resource reach every kind that embeds through
    `ProductEnv.execution`, never through the product's constructor."""
    from batch_pipeline.config import load_config
    from batch_pipeline.products import kinds_for, product_env, product_for_partition
    from batch_pipeline.state.storage import resolve_storage
    from batch_pipeline.state.tracking import TrackingStore
    from batch_pipeline.state.vector_store import VectorStore

    config = load_config(REPO / "pipeline.yaml")
    storage = resolve_storage(str(tmp_path / "home"))
    env = product_env(
        config,
        storage,
        TrackingStore(storage.tracking_url),
        VectorStore(storage.lancedb_uri),
        device="cpu",
        execution=ExecutorChoice(name=name),
    )
    keys = {"index": "handbook", "tickets": "2026-11-29"}
    embedding = [kind for kind in kinds_for(config) if kind.family == EMBED]
    assert sorted(kind.name for kind in embedding) == sorted(keys)
    for kind in embedding:
        partition = product_for_partition(kind, env, keys[kind.name]).partition(keys[kind.name])
        assert type(partition.executor) is executor_class(EMBED, name), kind.name
        assert partition.executor.device == "cpu"  # the inference settings ride with it


def test_the_batch_api_embedder_needs_an_address_and_leaves_device_and_dtype_to_it():
    """Refused when chosen, before any stage runs, naming the setting as the caller does;
    a provider's own model (another than the configured one) is another generation."""
    model = resolve_model(ModelConfig())
    flags = lambda setting: "--" + setting.replace("_", "-")  # noqa: E731
    with pytest.raises(ConfigError, match=r"^--api-base: the openai-batch executor needs"):
        embedding_executor(model, ExecutorChoice(name="openai-batch", spelled=flags))
    api = BatchApiSettings(api_base="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=r"^--dtype: 'float16' is the provider's to choose"):
        embedding_executor(
            model,
            ExecutorChoice(name="openai-batch", dtype="float16", batch_api=api, spelled=flags),
        )
    same = embedding_executor(model, ExecutorChoice(name="openai-batch", batch_api=api))
    assert same.served_model is None
    alias = replace(api, model=model.name)  # the configured model, named: the same one
    assert (
        embedding_executor(model, ExecutorChoice("openai-batch", batch_api=alias)).served_model
        is None
    )
    other = replace(api, model="text-embedding-3-small")
    chosen = embedding_executor(model, ExecutorChoice(name="openai-batch", batch_api=other))
    assert chosen.served_model == "text-embedding-3-small"
    chunking = ChunkingConfig()
    assert model_fingerprint(model, chunking, chosen.served_model) != model_fingerprint(
        model, chunking
    )
