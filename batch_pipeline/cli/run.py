"""`batch-pipeline run`: the five stages of one product's partition without Dagster, then its
review; what it prints while it waits, runs and holds back, and its exit status. Every kind,
built-in or declared, runs this one way: the registry finds the product over the partition,
the frame runs it, and the product's face reports it (`run_lines`, `run_json`).

A run with `--trigger schedule` is a nightly run, as the Dagster schedules' are: its review is
forced and the product's generations retired past `generations.retention_days` are dropped.
"""

import argparse
import sys
import uuid
from typing import TextIO

from tqdm import tqdm

from batch_pipeline.arguments import whole_number
from batch_pipeline.cli.context import CommandContext, to_json
from batch_pipeline.cli.executors import add_executor_flags, executor_flags_given
from batch_pipeline.config import ConfigError
from batch_pipeline.declaration import RunReport, review_after_run
from batch_pipeline.executors import DEFAULT_CHECKPOINT_EVERY, ExecuteOptions
from batch_pipeline.executors.registry import GENERATE, check_executor
from batch_pipeline.inference.batching import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_TOKEN_BUDGET,
    PlanSettings,
)
from batch_pipeline.inference.devices import BACKENDS
from batch_pipeline.measures.progress import ProgressSink, ProgressUpdate
from batch_pipeline.measures.run import MANUAL, SCHEDULE, TRIGGERS
from batch_pipeline.products import (
    KINDS,
    kind_for_partition,
    kind_named,
    kinds_for,
    product_for_partition,
)
from batch_pipeline.runs.landing import Landing
from batch_pipeline.runs.partition import StagedPartition

HELD_DELETIONS_EXIT = 3
UNREAD_EXIT = 4
ENGINE_FAMILY = GENERATE  # the family whose engines take parallel sizes and a Batch API


def _old_kind_spelling(ctx: CommandContext, args: argparse.Namespace) -> None:
    """`--product KIND` where KIND names a kind and no product: the old spelling of `--kind`
    (until the next release), said so on stderr."""
    kinds = [kind.name for kind in kinds_for(ctx.config)]
    if args.product not in kinds or args.product in ctx.product_names():
        return
    print(
        f"batch-pipeline: --product {args.product} is now --kind {args.product}; the old "
        "spelling goes in the next release",
        file=sys.stderr,
    )
    if args.kind not in (None, args.product):
        raise ConfigError(f"--product {args.product} and --kind {args.kind} disagree")
    args.kind, args.product = args.product, None


def _run_target(ctx: CommandContext, args: argparse.Namespace) -> tuple[str, str]:
    """The kind and the partition key `run` runs: `--product NAME` names a configured
    product; otherwise `--collection`, `--partition` or `--day` names the partition, and
    `--kind` which product over it (default: the first kind with one, in the registry's
    order). A ConfigError in one line for anything that names no runnable product."""
    _old_kind_spelling(ctx, args)
    kind = None if args.kind is None else kind_named(args.kind, ctx.config).name  # named first
    key = args.partition or args.collection or args.day
    if args.product is not None:
        if key:
            raise ConfigError("give --product or one of --collection, --partition, --day")
        target = ctx.product_target(args.product)
        if kind not in (None, target.kind):
            raise ConfigError(f"{args.product!r} is of kind {target.kind}, not {args.kind}")
        if target.collection is None:
            raise ConfigError(f"{args.product!r} runs a day at a time: give --day YYYY-MM-DD")
        return target.kind, target.collection
    if not key:
        raise ConfigError("run needs --collection, --partition, --day or --product")
    if kind is not None:
        return kind, key
    return kind_for_partition(ctx.config, key).name, key


def run_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    kind_name, key = _run_target(ctx, args)
    return run_partition(ctx, args, kind_name, key)


def run_partition(ctx: CommandContext, args: argparse.Namespace, kind_name: str, key: str) -> int:
    """Run the product of kind `kind_name` over the partition `key`, review it, report it;
    the exit status."""
    kind = kind_named(kind_name, ctx.config)
    if kind.family is None and (flags := executor_flags_given(args)):
        raise ConfigError(f"{', '.join(flags)}: --kind {kind.name} runs no model")
    if kind.family is not None:
        check_executor(kind.family, getattr(args, "executor", None), "--executor")
    if kind.family != ENGINE_FAMILY and (flags := executor_flags_given(args, engine_only=True)):
        runnable = [k.name for k in kinds_for(ctx.config) if k.family == ENGINE_FAMILY]
        raise ConfigError(
            f"{', '.join(flags)}: for --kind {', '.join(runnable)} only, not --kind {kind.name}"
        )
    product = product_for_partition(kind, ctx.product_env(args), key)
    partition = product.partition(key)
    run_id = args.run_id or str(uuid.uuid4())
    runners = ctx.runners(args)  # one load: execute and the review share the model
    progress, interval = _progress_sink(sys.stderr)
    summaries = partition.run(
        run_id,
        product.engine_loader(partition, runners),
        options=_execute_options(args),
        doc_ids=args.doc_ids,
        trigger=args.trigger,
        allow_mass_delete=args.allow_mass_delete,
        progress=progress,
        progress_interval=interval,
        on_wait=lambda holder: _on_wait(holder, partition.partition),
    )
    review, dropped = review_after_run(product, runners, nightly=args.trigger == SCHEDULE)
    extra = product.after_review(runners, run_id)
    report = RunReport(run_id, product.name, partition, summaries, review, dropped, extra)
    if args.json:
        print(to_json(product.run_json(report)))
    else:
        print("\n".join(product.run_lines(report)))
    landing = report.landing
    return _held_deletions(landing, partition.stages[-1].asset) or _unread(
        partition, run_id, landing
    )


def _execute_options(args: argparse.Namespace) -> ExecuteOptions:
    """`run`'s plan and execute settings: the token budget, batch size and checkpoints."""
    plan = PlanSettings(args.token_budget, args.max_batch_size)
    return ExecuteOptions(plan, checkpoint_every=args.checkpoint_every)


def _on_wait(holder: str, partition: str) -> None:
    """What a run says while another run holds its partition's lease."""
    print(
        f"batch-pipeline: waiting for run {holder}, which is running partition "
        f"{partition}; then running only what is still stale",
        file=sys.stderr,
    )


def _unread(partition: StagedPartition, run_id: str, landing: Landing) -> int:
    """Exit status 4, and a line, when the run could not read too much of its source."""
    excess = partition.unread_excess(run_id, landing.measures.attempted)
    if excess is None:
        return 0
    print(
        f"batch-pipeline: {excess}; what did read has landed; `batch-pipeline failures` "
        "lists the rest with their reasons, and the next run retries them",
        file=sys.stderr,
    )
    return UNREAD_EXIT


def _held_deletions(landed: Landing, asset: str) -> int:
    """Exit status 3, and what to do, when the run held back a mass deletion."""
    if not landed.deletions_held:
        return 0
    print(
        f"batch-pipeline: held back {landed.deletions_held} deletions: "
        f"{landed.deletions_held_reason}. Everything else landed. If the source really lost "
        f"them, run again with --allow-mass-delete (from Dagster: materialise {asset} with "
        "the run config allow_mass_delete: true).",
        file=sys.stderr,
    )
    return HELD_DELETIONS_EXIT


def _progress_sink(stream: TextIO) -> tuple[ProgressSink, float]:
    """A progress bar on a terminal, plain lines every 30 s otherwise; and the pace."""
    if not stream.isatty():
        return (lambda update: print(f"batch-pipeline: {update.line()}", file=stream)), 30.0
    bars: dict[str, tqdm] = {}

    def show(update: ProgressUpdate) -> None:
        bar = bars.get(update.stage)
        if bar is None:
            bar = bars[update.stage] = tqdm(
                total=update.total, desc=update.stage, unit=f" {update.unit}", file=stream
            )
        bar.update(update.done - bar.n)
        if update.tokens:
            rate = f"{update.tokens_per_second:,.0f} {update.token_unit}/s"
            bar.set_postfix_str(rate, refresh=False)
        bar.refresh()
        if update.finished:
            bar.close()

    return show, 0.5


def add_commands(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="run the five stages for a collection or one partition, no Dagster"
    )
    target = run.add_mutually_exclusive_group()
    target.add_argument("--collection", help="a configured collection (all of its shards)")
    target.add_argument("--partition", help="one partition: a collection or a shard (name-sNN)")
    target.add_argument("--day", help="one day of the ticket intent product (YYYY-MM-DD)")
    run.add_argument(
        "--product",
        help="a product by name: a collection (its vector index) or <collection>_briefs",
    )
    run.add_argument(
        "--kind",
        help=f"which product over the partition to run: {', '.join(k.name for k in KINDS)} or "
        "a kind the configuration declares (products:); default: the first kind with a "
        "product over it (a collection's vector index; the tickets with --day)",
    )
    add_executor_flags(run)
    run.add_argument("--doc-id", action="append", dest="doc_ids", help="targeted run (repeat)")
    run.add_argument("--run-id", help="default: a new UUID")
    run.add_argument("--device", default="auto")
    run.add_argument("--dtype", default="auto")
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="what runs the embedding model: torch, openvino (CPU), or auto: measured",
    )
    for flag, default, meaning in [
        ("--checkpoint-every", DEFAULT_CHECKPOINT_EVERY, "batches per checkpoint"),
        ("--token-budget", DEFAULT_TOKEN_BUDGET, "padded tokens per batch"),
        ("--max-batch-size", DEFAULT_MAX_BATCH_SIZE, "inputs per batch"),
    ]:
        run.add_argument(
            flag,
            type=whole_number(1),
            default=default,
            metavar="N",
            help=f"{meaning} (default {default})",
        )
    run.add_argument(
        "--trigger",
        choices=TRIGGERS,
        default=MANUAL,
        help="what started the run, as its measures record it; cron users say schedule "
        "(default manual)",
    )
    run.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="confirm deletions beyond limits.max_delete_fraction / max_delete_documents "
        "(held back otherwise, and the run exits 3)",
    )
    run.add_argument("--json", action="store_true", help="print JSON")


COMMANDS = {"run": run_command}
