"""The inference resource's configuration: every field described, and a value out of range
refused when the resource is made (when the code location loads), naming the field."""

import dagster as dg
import pytest

from resources import InferenceResource


def test_every_field_is_described():
    fields = InferenceResource.model_fields
    assert not [name for name, field in fields.items() if not field.description]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("token_budget", 0),
        ("max_batch_size", -1),
        ("num_threads", 0),
        ("prefetch_batches", 0),
        ("cuda_memory_fraction", 0.0),
        ("cuda_memory_fraction", 1.5),
        ("fidelity_min_cosine", 1.01),
    ],
)
def test_an_out_of_range_setting_is_refused_by_its_field(field, value):
    with pytest.raises(Exception, match=field):
        InferenceResource(**{field: value})


def test_the_defaults_and_the_edges_of_each_range_are_accepted():
    InferenceResource()
    InferenceResource(
        token_budget=1,
        max_batch_size=1,
        num_threads=1,
        prefetch_batches=1,
        cuda_memory_fraction=1.0,
        fidelity_min_cosine=1.0,
    )


def test_a_run_configured_out_of_range_fails_before_any_step_naming_the_field():
    @dg.asset
    def needs_inference(inference: InferenceResource) -> None:
        """Asks for the resource."""

    with pytest.raises(dg.DagsterResourceFunctionError) as raised:
        dg.materialize(
            [needs_inference],
            resources={"inference": InferenceResource()},
            run_config={"resources": {"inference": {"config": {"token_budget": 0}}}},
        )
    assert "token_budget" in str(raised.value.__cause__)


@pytest.mark.parametrize(
    ("executor", "setting", "value"),
    [("vllm", "dtype", "int8"), ("vllm-run-batch", "dtype", "int8"), ("vllm", "device", "mps")],
)
def test_a_setting_the_executor_cannot_run_fails_before_any_step(executor, setting, value):
    @dg.asset
    def needs_inference(inference: InferenceResource) -> None:
        """Asks for the resource."""

    config = {"executor": executor, setting: value}
    with pytest.raises(dg.DagsterResourceFunctionError) as raised:
        dg.materialize(
            [needs_inference],
            resources={"inference": InferenceResource()},
            run_config={"resources": {"inference": {"config": config}}},
        )
    assert f"InferenceResource.{setting} with executor {executor}" in str(raised.value.__cause__)
