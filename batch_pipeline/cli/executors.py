"""`run`'s executor flags, for every kind whose executor runs a model: which executor by name
(`--executor`), the engine's parallel sizes, and where a Batch API executor submits. What they
choose reaches the product through its `ProductEnv` (`executors.ExecutorChoice`). And
`batch-pipeline executors`: the registry's executors by family, with their capabilities."""

import argparse
import json
from dataclasses import asdict

from batch_pipeline.arguments import whole_number
from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.batch_api import BatchApiSettings
from batch_pipeline.executors.registry import (
    EXECUTORS,
    all_executor_names,
    default_executor,
    executor_class,
    executors_with,
)

PARALLEL = ("tensor_parallel_size", "data_parallel_size")


def add_executor_flags(run: argparse.ArgumentParser) -> None:
    """`--executor`, the parallel sizes and the Batch API's flags."""
    families = "; ".join(
        f"{family}: {', '.join(names)} (default {next(iter(names))})"
        for family, names in EXECUTORS.items()
    )
    run.add_argument(
        "--executor",
        choices=all_executor_names(),
        help="what runs the kind's plan, by its model family's executors: " + families + ". "
        "local embeds in this process (torch or OpenVINO); vllm runs vLLM's engine in this "
        "process; vllm-run-batch runs vLLM's own run-batch over the plan's OpenAI batch "
        "files; openai-batch sends the same files to a Batch API at --api-base",
    )
    for side, meaning in (
        ("tensor", "GPUs one engine's layers are split over (a model too big for one GPU)"),
        (
            "data",
            "engines, one per GPU (or tensor-parallel group), each taking a share of the "
            "requests: --executor vllm-run-batch only",
        ),
    ):
        run.add_argument(
            f"--{side}-parallel-size",
            type=whole_number(1),
            default=1,
            metavar="N",
            help=f"{meaning} (default 1)",
        )
    api = run.add_argument_group("openai-batch executor (every model family)")
    api.add_argument("--api-base", help="the Batch API's base URL (a provider's or a gateway's)")
    api.add_argument(
        "--api-model",
        help="the provider's name of the model (default: the configured chat or embedding "
        "model's; another model is another generation, reviewed as any is)",
    )
    api.add_argument(
        "--api-key-env",
        default=None,
        help="the environment variable holding the key (default the provider's: "
        "OPENAI_API_KEY, or ANTHROPIC_API_KEY for anthropic-batch)",
    )
    api.add_argument("--completion-window", default="24h", help="default 24h")
    api.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wait at most this long for the batches (default: until done; 0: "
        "submit and return, and collect with the next run)",
    )
    for side in ("input", "output"):
        api.add_argument(
            f"--price-per-million-{side}-tokens",
            type=float,
            default=0.0,
            help=f"the provider's batch price of {side} tokens, for the measures",
        )


def executor_flags_given(args: argparse.Namespace, engine_only: bool = False) -> list[str]:
    """The executor flags given that change anything (a kind that runs no model refuses
    them); with `engine_only`, those that only a chat model's engine takes (an embedding
    kind refuses them). `--api-base` is every Batch API executor's (`batch_api_of`)."""
    return [
        flag
        for flag, value in (
            ("--executor", not engine_only and getattr(args, "executor", None)),
            ("--api-base", not engine_only and getattr(args, "api_base", None)),
            ("--tensor-parallel-size", (getattr(args, "tensor_parallel_size", 1) or 1) > 1),
            ("--data-parallel-size", (getattr(args, "data_parallel_size", 1) or 1) > 1),
        )
        if value
    ]


def batch_api_of(args: argparse.Namespace) -> BatchApiSettings | None:
    """The Batch API executor's settings from `run`'s flags; None without --api-base, and a
    ConfigError with it for another executor (it would be silently unused)."""
    if getattr(args, "api_base", None) is None:
        return None
    takers = executors_with("provider_batches")
    if getattr(args, "executor", None) not in takers:
        raise ConfigError(f"--api-base: for --executor {' or '.join(takers)} only")
    return BatchApiSettings(
        api_base=args.api_base,
        api_key_env=args.api_key_env,
        model=args.api_model,
        completion_window=args.completion_window,
        wait_seconds=args.wait,
        price_per_million_input_tokens=args.price_per_million_input_tokens,
        price_per_million_output_tokens=args.price_per_million_output_tokens,
    )


def executor_choice(args: argparse.Namespace) -> ExecutorChoice:
    """What the flags chose, spelled as flags in any error a product raises about them."""
    return ExecutorChoice(
        name=getattr(args, "executor", None),
        batch_api=batch_api_of(args),
        engine_options={field: getattr(args, field, 1) or 1 for field in PARALLEL},
        spelled=lambda setting: "--" + setting.replace("_", "-"),
    )


def add_commands(commands: argparse._SubParsersAction) -> None:
    listed = commands.add_parser(
        "executors",
        help="every executor by model family, with what it can do (its capabilities)",
    )
    listed.add_argument("--json", action="store_true", help="print JSON")


def executors(ctx: object, args: argparse.Namespace) -> int:
    """Each family's executors, its default first, with the capabilities each declares and,
    for one that submits to a provider, the API it speaks."""
    rows = []
    for family, names in EXECUTORS.items():
        for name in names:
            cls = executor_class(family, name)
            declared = asdict(cls.capabilities)
            rows.append(
                {
                    "family": family,
                    "executor": name,
                    "default": name == default_executor(family),
                    "capabilities": sorted(k for k, v in declared.items() if v),
                    "api": cls.client.wire if declared["provider_batches"] else None,
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'FAMILY':<9} {'EXECUTOR':<17} {'API':<10} CAPABILITIES")
    for row in rows:
        name = row["executor"] + (" *" if row["default"] else "")
        said = ", ".join(row["capabilities"]) or "-"
        print(f"{row['family']:<9} {name:<17} {row['api'] or '-':<10} {said}")
    print("* the family's default")
    return 0


COMMANDS = {"executors": executors}
