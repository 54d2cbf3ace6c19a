"""The generation resource in Dagster: a described, checked configuration, the `gpu` pool,
and an asset that plans and generates through it (the FAKE generator behind the resource)."""

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.partitions import GPU_POOL
from batch_pipeline.inference.chat_models import ChatModelNotAvailableError
from batch_pipeline.stages.generate import execute_prompts
from batch_pipeline.stages.prompt_plan import plan_prompts, prepared_prompts_schema
from batch_pipeline.state.staging import read_table
from resources import GenerationResource
from resources.testing import FakeGenerationResource

SCHEMA = {"type": "object", "required": ["summary"], "properties": {"summary": {"type": "string"}}}


def test_every_field_is_described_and_the_pool_is_the_deployment_s_gpu_pool():
    fields = GenerationResource.model_fields
    assert not [name for name, f in fields.items() if not f.description]
    for name in (
        "model_path",
        "dtype",
        "kv_cache_gib",
        "gpu_memory_utilization",
        "max_num_seqs",
        "max_model_len",
        "enforce_eager",
        "greedy",
        "max_tokens",
        "pool",
    ):
        assert name in fields
    assert GenerationResource().pool == GPU_POOL
    assert GenerationResource().sampling.greedy


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"dtype": "int4"}, "dtype"),
        ({"device": "tpu"}, "device"),
        ({"data_parallel_size": 8}, "data_parallel_size"),  # in-process: one engine
        ({"executor": "openai-batch"}, "api_base"),  # nowhere to submit
        (
            {"executor": "openai-batch", "api_base": "http://x/v1", "completion_window": "1w"},
            "completion_window",
        ),
    ],
)
def test_a_bad_setting_fails_at_load_and_names_the_field(settings, field):
    @dg.asset
    def needs_generation(generation: GenerationResource) -> None:
        """Asks for the resource."""

    with pytest.raises(dg.DagsterResourceFunctionError) as raised:
        dg.materialize([needs_generation], resources={"generation": GenerationResource(**settings)})
    assert f"GenerationResource.{field}" in str(raised.value.__cause__)


def test_out_of_range_settings_are_refused_by_their_field():
    with pytest.raises(Exception, match="max_num_seqs"):
        GenerationResource(max_num_seqs=0)
    with pytest.raises(Exception, match="gpu_memory_utilization"):
        GenerationResource(gpu_memory_utilization=1.5)


def test_a_model_path_that_is_no_model_folder_says_so(tmp_path):
    with pytest.raises(ChatModelNotAvailableError, match="no config.json"):
        GenerationResource(model_path=str(tmp_path)).chat_model()


def test_an_asset_plans_and_generates_through_the_resource(tmp_path):
    prepared = tmp_path / "prepared.parquet"
    rows = [
        {"input_hash": f"h{i}", "system": "Brief it.", "user": f"page {i} text"} for i in range(5)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=prepared_prompts_schema()), prepared)

    @dg.asset(pool=GPU_POOL)
    def briefs(generation: GenerationResource) -> dg.MaterializeResult:
        """Plans the prompts, then generates them."""
        generator = generation.generator()
        plan = plan_prompts(
            prepared,
            tmp_path / "plan.parquet",
            generator,
            generation.sampling,
            generation.plan_settings(),
        )
        done = execute_prompts(
            tmp_path / "plan.parquet",
            tmp_path / "out.parquet",
            generation.generator,
            generation.sampling,
            SCHEMA,
        )
        return dg.MaterializeResult(metadata={**plan.metadata(), **done.metadata(0.1)})

    result = dg.materialize([briefs], resources={"generation": FakeGenerationResource()})
    assert result.success
    (materialization,) = result.asset_materializations_for_node("briefs")
    metadata = {k: v.value for k, v in materialization.metadata.items()}
    assert metadata["requests_generated"] == 5 and metadata["valid_share"] == 1.0
    assert metadata["estimated_peak_kv_share"] > 0
    outputs = read_table(tmp_path / "out.parquet").to_pylist()
    assert [json.loads(o["text"])["summary"] for o in outputs][0].startswith("page 0")


def test_a_fraction_of_a_gib_for_the_kv_cache_is_refused_not_rounded():
    """vLLM's CPU engine takes VLLM_CPU_KVCACHE_SPACE in whole GiB: 1.5 was rounded to 2 (and
    0.4 up to 1) while the prompt plan estimated the KV use against the value as written."""
    import pydantic

    with pytest.raises(pydantic.ValidationError, match="kv_cache_gib"):
        GenerationResource(kv_cache_gib=1.5)
    with pytest.raises(pydantic.ValidationError, match="kv_cache_gib"):
        GenerationResource(kv_cache_gib=0)
    settings = FakeGenerationResource(kv_cache_gib=2).engine_settings()
    assert settings.kv_cache_bytes == 2 * (1 << 30)  # the plan's estimate: what the engine gets


def test_the_gpu_fields_reach_run_batch_s_command_line():
    from batch_pipeline.executors.run_batch import run_batch_command
    from batch_pipeline.inference.chat_models import ChatModel
    from batch_pipeline.inference.vllm_generator import EngineSettings, VllmGenerator

    model = ChatModel(
        name="m",
        path=Path("/models/m"),
        files_hash="h",
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
    )
    one = EngineSettings(device="cuda", dtype="bfloat16")
    eight = EngineSettings(
        device="cuda", dtype="bfloat16", data_parallel_size=4, tensor_parallel_size=2
    )
    plain = run_batch_command(VllmGenerator(model, one), Path("in"), Path("out"))
    assert "--data-parallel-size" not in plain and "--tensor-parallel-size" not in plain
    spread = run_batch_command(VllmGenerator(model, eight), Path("in"), Path("out"))
    assert spread[spread.index("--data-parallel-size") + 1] == "4"
    assert spread[spread.index("--tensor-parallel-size") + 1] == "2"
    with pytest.raises(ValueError, match="vllm-run-batch"):
        VllmGenerator(model, eight).engine()  # the in-process engine refuses data parallelism


def test_tensor_parallelism_must_split_the_model_s_heads_and_be_an_engine_s():
    """The shipped model has 9 attention heads (3 key/value heads): vLLM refuses 2 GPUs per
    engine at its start; the resource refuses it at load, naming the field and what fits."""
    from batch_pipeline.executors.generation import parallel_problem
    from batch_pipeline.inference.fake import fake_chat_model

    model = fake_chat_model()  # the shipped model's shape
    assert parallel_problem("vllm", model, 3, 1) is None
    assert parallel_problem("vllm-run-batch", model, 3, 2) is None
    field, why = parallel_problem("vllm-run-batch", model, 2, 1)
    assert field == "tensor_parallel_size" and "one of 1, 3, 9" in why
    assert parallel_problem("openai-batch", model, 3, 1)[0] == "tensor_parallel_size"
    assert parallel_problem("vllm", model, 1, 2)[0] == "data_parallel_size"

    @dg.asset
    def needs_generation(generation: GenerationResource) -> None:
        """Asks for the resource."""

    for settings, words in (
        ({"tensor_parallel_size": 2}, "attention heads"),
        ({"executor": "vllm-run-batch", "tensor_parallel_size": 4}, "one of 1, 3, 9"),
    ):
        with pytest.raises(dg.DagsterResourceFunctionError) as raised:
            dg.materialize(
                [needs_generation], resources={"generation": GenerationResource(**settings)}
            )
        message = str(raised.value.__cause__)
        assert message.startswith("GenerationResource.tensor_parallel_size:") and words in message


def test_execute_is_priced_by_the_gpus_its_engines_hold():
    """Eight GPUs for an hour cost eight GPU hours: the run records the devices, and its cost
    per 1,000 requests (and the run's measures) is the device price times them."""
    from batch_pipeline.config import PipelineConfig
    from batch_pipeline.inference.vllm_generator import EngineSettings
    from batch_pipeline.measures.run import RunMeasures
    from batch_pipeline.stages.generate import GenerateSummary, GenerationStats

    assert EngineSettings(device="cuda", tensor_parallel_size=2, data_parallel_size=4).devices == 8
    assert EngineSettings(device="cpu", data_parallel_size=2).devices == 1  # one host
    stats = GenerationStats(requests=1000, seconds=100.0)
    one = GenerateSummary(stats=stats, device="cuda", dtype="bfloat16")
    eight = GenerateSummary(stats=stats, device="cuda", dtype="bfloat16", devices=8)
    assert eight.cost_per_1k_requests(3.6) == pytest.approx(8 * one.cost_per_1k_requests(3.6))
    assert eight.metadata(3.6)["devices"] == 8
    config = PipelineConfig.model_validate(
        {
            "collections": [{"name": "c", "source": {"kind": "filesystem", "path": "."}}],
            "cost": {"device_hour": {"cuda": 3.6}},
        }
    )
    executed = {"inputs": 1000, "seconds": 100.0, "device": "cuda", "devices": 8}
    measures = RunMeasures.from_execute(
        executed, config, "manual", partition="c", started_at=0.0, finished_at=200.0
    )
    assert measures.device_price_hour == pytest.approx(8 * 3.6)
    assert measures.execute_cost == pytest.approx(8 * 3.6 * 100 / 3600)
    assert measures.metadata()["devices"] == 8
    assert RunMeasures.from_record(measures.record()).devices == 8


def test_report_names_the_gpus_a_run_held():
    from batch_pipeline.measures.report import run_path

    run = {"executor": "vllm-run-batch", "dtype": "bfloat16"}
    assert run_path(run) == "vllm-run-batch/bfloat16"
    assert run_path({**run, "devices": 1}) == "vllm-run-batch/bfloat16"
    assert run_path({**run, "devices": 8}) == "vllm-run-batch/bfloat16 x8"
    provider = {"executor": "openai-batch", "device": "provider", "devices": None}
    assert run_path(provider) == "openai-batch"  # as a provider's run records itself
