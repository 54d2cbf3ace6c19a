"""Executors say what they can do (`Capabilities`, declared on each class), and every caller
asks that rather than an executor's name: a second Batch API provider is one module and one
registry line, and the CLI, the resources, the configuration and the products take it."""

import argparse
import ast
import dataclasses
import json
from pathlib import Path

import dagster as dg
import pytest

from batch_pipeline.cli.executors import add_executor_flags, executor_choice
from batch_pipeline.config import ConfigError
from batch_pipeline.config.tickets import CascadeConfig
from batch_pipeline.executors import Capabilities, ExecutorChoice
from batch_pipeline.executors.batch_api import BatchLedger, with_ledger
from batch_pipeline.executors.generation import generation_executor, parallel_problem
from batch_pipeline.executors.openai_batch import OpenAIBatchExecutor
from batch_pipeline.executors.registry import (
    EXECUTORS,
    GENERATE,
    all_executor_names,
    capabilities,
    executor_class,
    executors_with,
)
from batch_pipeline.inference.fake import FakeGenerator, fake_chat_model
from batch_pipeline.inference.generator import Sampling
from batch_pipeline.stages.prompt_plan import PromptPlanSettings
from resources.generation import GenerationResource

REPO = Path(__file__).resolve().parents[2]
SECOND = "acme-batch"  # the second provider's executor, registered by the fixture below


@dataclasses.dataclass(frozen=True)
class AcmeBatchExecutor(OpenAIBatchExecutor):
    """NOT A PROVIDER: a second Batch API provider's executor, as its own module would hold
    it (here it sends what the OpenAI-compatible one sends). For tests only."""


@pytest.fixture
def second_provider(monkeypatch):
    """The one registry line a second provider adds."""
    monkeypatch.setitem(EXECUTORS[GENERATE], SECOND, f"{__name__}:AcmeBatchExecutor")
    return SECOND


@pytest.mark.parametrize(
    ("family", "name"), [(f, n) for f, names in EXECUTORS.items() for n in names]
)
def test_every_executor_declares_what_it_can_do(family, name):
    """Each registered executor's class declares its capabilities; one that sends a
    provider batches takes the settings and the ledger the frame gives it."""
    chosen = executor_class(family, name)
    assert isinstance(chosen.capabilities, Capabilities)
    fields = {f.name for f in dataclasses.fields(chosen)}
    assert chosen.capabilities.provider_batches == ({"api", "ledger"} <= fields)


def test_parallel_sizes_follow_the_declared_capabilities():
    model = fake_chat_model()
    assert parallel_problem("vllm", model, 1, 2)[0] == "data_parallel_size"
    assert parallel_problem("vllm-run-batch", model, 1, 2) is None
    assert parallel_problem("openai-batch", model, 2, 1) == (
        "tensor_parallel_size",
        "splits a vLLM engine: executor openai-batch runs none",
    )


def _compared_names(path: Path, names: set[str], root: Path = REPO) -> list[str]:
    """Where `path` compares something with an executor's name (`== "vllm"`, `in (...)`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            items = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
            for item in items:
                if isinstance(item, ast.Constant) and item.value in names:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {item.value!r}")
    return found


def test_no_code_outside_the_executors_compares_an_executor_s_name():
    """What differs between executors is asked of their capabilities; only `executors/`
    knows them by name (the benchmarks' methods are named like executors but are not)."""
    names = set(all_executor_names())
    outside = [
        path
        for folder in ("batch_pipeline", "assets", "resources", "sensors")
        for path in (REPO / folder).rglob("*.py")
        if not {"executors", "bench"} & set(path.relative_to(REPO).parts)
    ]
    assert len(outside) > 100
    found = [place for path in outside for place in _compared_names(path, names)]
    assert not found, found


def test_the_check_catches_a_compared_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(x):\n    return x.executor == "openai-batch" or x in ("vllm",)\n')
    assert _compared_names(bad, {"openai-batch", "vllm"}, tmp_path) == [
        "bad.py:2 'openai-batch'",
        "bad.py:2 'vllm'",
    ]


def _run_flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_executor_flags(parser)
    return parser.parse_args(list(argv))


def test_a_second_provider_is_one_registry_line(second_provider, monkeypatch):
    """Registered, the second provider's executor is taken as the first is: by the CLI's
    flags, the generation resource, the cascade's section and the generate family's
    `chosen()`, each asking its capabilities."""
    monkeypatch.setenv("ACME_KEY", "sk-test")
    assert capabilities(GENERATE, second_provider).provider_batches
    assert executors_with("provider_batches") == [
        second_provider,
        "anthropic-batch",
        "openai-batch",
    ]

    # the CLI: --api-base is the second provider's too, and spelled as a flag when missing
    flags = _run_flags("--executor", second_provider, "--api-base", "http://127.0.0.1:9/v1")
    choice = executor_choice(flags)
    assert choice.batch_api.api_base == "http://127.0.0.1:9/v1"
    with pytest.raises(
        ConfigError, match=r"^--api-base: for --executor acme-batch or anthropic-batch or openai-"
    ):
        executor_choice(_run_flags("--executor", "vllm", "--api-base", "http://x/v1"))

    # the generate family's chosen(): the settings travel, the frame's ledger is taken
    generator = FakeGenerator(fake_chat_model())
    args = (generator, Sampling(max_tokens=8), None, PromptPlanSettings())
    with pytest.raises(ConfigError, match=r"^--api-base: the openai-batch executor needs"):
        generation_executor(executor_choice(_run_flags("--executor", second_provider)), *args)
    executor = generation_executor(choice, *args)
    assert type(executor) is AcmeBatchExecutor and executor.api == choice.batch_api
    ledger = BatchLedger(None, "briefs__abc", "handbook")  # type: ignore[arg-type]
    assert with_ledger(executor, ledger).ledger is ledger

    # the generation resource refuses it without api_base, naming the field
    resource = GenerationResource(executor=second_provider)
    with pytest.raises(ValueError, match=r"GenerationResource.api_base: the acme-batch executor"):
        resource.setup_for_execution(dg.build_init_resource_context())
    assert resource.model_copy(update={"api_base": "http://x/v1"}).execution().batch_api

    # the cascade's section: it takes batch_api, and any other executor refuses one
    api = {"api_base": "http://127.0.0.1:9/v1", "api_key_env": "ACME_KEY"}
    assert CascadeConfig(target_accuracy=0.9, executor=second_provider, batch_api=api)
    with pytest.raises(ValueError, match="batch_api: the acme-batch executor needs one"):
        CascadeConfig(target_accuracy=0.9, executor=second_provider)
    with pytest.raises(
        ValueError, match="batch_api: only openai-batch or anthropic-batch or acme-batch takes one"
    ):
        CascadeConfig(target_accuracy=0.9, executor="vllm-run-batch", batch_api=api)


def test_an_executor_that_starts_its_own_engine_refuses_a_stand_in_generator():
    """vLLM's run-batch starts an engine from the chat model's engine settings, which a
    test's stand-in generator does not have: refused when chosen, naming the setting."""
    args = (FakeGenerator(fake_chat_model()), Sampling(max_tokens=8), None, PromptPlanSettings())
    choice = ExecutorChoice(name="vllm-run-batch", spelled=lambda s: f"tickets.cascade.{s}")
    with pytest.raises(ConfigError, match=r"^tickets.cascade.executor vllm-run-batch: runs vLLM"):
        generation_executor(choice, *args)
    assert generation_executor(ExecutorChoice(name="vllm"), *args).generator is args[0]
    with pytest.raises(ConfigError, match=r"^executor 'local' runs no generate model"):
        generation_executor(ExecutorChoice(name="local"), *args)


def test_the_executors_command_lists_every_family_s_executors_with_capabilities(tmp_path, capsys):
    from batch_pipeline import cli

    (tmp_path / "docs").mkdir()
    config = tmp_path / "pipeline.yaml"
    config.write_text("collections:\n  - name: h\n    source: {kind: filesystem, path: docs}\n")
    args = ["--config", str(config), "--home", str(tmp_path / "home"), "executors"]
    assert cli.main([*args, "--json"]) == 0
    rows = {(r["family"], r["executor"]): r for r in json.loads(capsys.readouterr().out)}
    assert {(family, name) for family, names in EXECUTORS.items() for name in names} == set(rows)
    anthropic = rows[(GENERATE, "anthropic-batch")]
    assert anthropic["capabilities"] == ["provider_batches"] and anthropic["api"] == "anthropic"
    assert rows[(GENERATE, "openai-batch")]["api"] == "openai"
    assert rows[(GENERATE, "vllm")]["default"] and not anthropic["default"]
    assert rows[(GENERATE, "vllm-run-batch")]["capabilities"] == [
        "data_parallel",
        "own_engine",
        "tensor_parallel",
    ]
    assert cli.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["FAMILY", "EXECUTOR", "API", "CAPABILITIES"]
    assert any(line.split()[:3] == ["generate", "anthropic-batch", "anthropic"] for line in lines)
