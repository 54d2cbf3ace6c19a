"""`batch-pipeline run`: the five stages of one product's partition without Dagster, then its
review; what it prints while it waits, runs and holds back, and its exit status."""

import argparse
import sys
import uuid
from typing import TextIO

from tqdm import tqdm

from batch_pipeline.briefs.kind import BRIEFS
from batch_pipeline.cli import briefs as brief_commands
from batch_pipeline.cli import tickets as ticket_commands
from batch_pipeline.cli.context import CommandContext, to_json
from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.index.kind import INDEX
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.measures.progress import ProgressSink, ProgressUpdate, duration
from batch_pipeline.measures.run import RunMeasures
from batch_pipeline.products import KINDS, kind_named, product_for_partition
from batch_pipeline.runs import Landing
from batch_pipeline.stages import COLLECT, EXECUTE, LAND, PREPARE, STAGES
from batch_pipeline.tickets.kind import TICKETS

RUN_KINDS = tuple(kind.name for kind in KINDS)  # the built-in kinds `run --kind` takes
OLD_KIND_SPELLING = (INDEX.name, BRIEFS.name)  # `run --product index|briefs`, for a release


def _run_target(ctx: CommandContext, args: argparse.Namespace) -> None:
    """Settle what `run` runs into `args.kind` and one of --collection, --partition and --day:
    `--product NAME` names a configured product; `--product index|briefs` is the old
    spelling of `--kind` (until the next release)."""
    if args.product in OLD_KIND_SPELLING and args.product not in ctx.product_names():
        print(
            f"batch-pipeline: --product {args.product} is now --kind {args.product}; the old "
            "spelling goes in the next release",
            file=sys.stderr,
        )
        if args.kind not in (None, args.product):
            raise ConfigError(f"--product {args.product} and --kind {args.kind} disagree")
        args.kind, args.product = args.product, None
    if args.product is not None:
        if args.collection or args.partition or args.day:
            raise ConfigError("give --product or one of --collection, --partition, --day")
        target = ctx.product_target(args.product)
        if args.kind not in (None, target.kind):
            raise ConfigError(f"{args.product!r} is of kind {target.kind}, not {args.kind}")
        if target.collection is None:
            raise ConfigError(f"{args.product!r} runs a day at a time: give --day YYYY-MM-DD")
        args.kind, args.collection = target.kind, target.collection
    if not (args.collection or args.partition or args.day):
        raise ConfigError("run needs --collection, --partition, --day or --product")
    if args.kind is not None:
        kind_named(args.kind, ctx.config)  # a ConfigError naming the kinds there are
    if args.day:
        args.kind = args.kind or TICKETS.name
        if args.kind != TICKETS.name:
            raise ConfigError(f"--day runs the {TICKETS.name}, not {args.kind}")
        return
    args.kind = args.kind or INDEX.name
    if args.kind == TICKETS.name:
        raise ConfigError(f"--kind {TICKETS.name} runs a day at a time: give --day YYYY-MM-DD")
    if args.kind == BRIEFS.name and not args.collection:  # one shard of a collection
        args.collection = ctx.config.locate(args.partition)[0].name


def _chat_model_flags(args: argparse.Namespace) -> list[str]:
    """The flags given that only a chat-model run (`--kind briefs`) reads."""
    return [
        flag
        for flag, value in (
            ("--executor", args.executor),
            ("--api-base", args.api_base),
            ("--tensor-parallel-size", args.tensor_parallel_size > 1),
            ("--data-parallel-size", args.data_parallel_size > 1),
        )
        if value
    ]


def run_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    _run_target(ctx, args)
    if args.kind != BRIEFS.name and (flags := _chat_model_flags(args)):
        raise ConfigError(f"{', '.join(flags)}: for --kind briefs only, not --kind {args.kind}")
    if args.kind not in RUN_KINDS:
        return _run_declared(ctx, args)
    if args.kind == BRIEFS.name:
        progress, interval = _progress_sink(sys.stderr)
        product = ctx.briefs(args.collection, args)
        landed = brief_commands.run_briefs(
            product, args, progress, interval, ctx.runners(args), _on_wait
        )
        return _held_deletions(landed, "document_briefs")
    if args.day:
        landed = ticket_commands.run_day(
            ctx.tickets(), args, ctx.runners(args), _progress_sink(sys.stderr)[0],
            _execute_options(args),
        )  # fmt: skip
        return _held_deletions(landed, "ticket_intents")
    pipeline = ctx.pipeline(args.collection) if args.collection else ctx.partition(args.partition)
    run_id = args.run_id or str(uuid.uuid4())
    runners = ctx.runners(args)  # one load: execute and the review share the model
    summaries = _run_partition(pipeline, run_id, runners, args)
    review = pipeline.review(runners)
    stages = {stage.name: summaries[stage.name].metadata() for stage in STAGES}
    # the key's old name, for scripts that read it, until the next release (CHANGELOG.md)
    stages[EXECUTE.name]["chunks_embedded"] = stages[EXECUTE.name]["inputs_embedded"]
    failed = sum(stages[s.name]["documents_failed"] for s in (COLLECT, PREPARE, LAND))
    measures = summaries[LAND.name].measures
    report = {
        "run_id": run_id,
        **stages,
        "documents_failed": failed,
        "measures": measures.metadata(),
        "generation": review.metadata(),
    }
    if args.json:
        print(to_json(report))
    else:
        land = stages[LAND.name]
        print(
            f"run {run_id}: {stages[EXECUTE.name]['inputs_embedded']} chunks embedded, "
            f"{land['documents_landed']} documents landed, {land['documents_deleted']} deleted, "
            f"{failed} failed"
        )
        line = f"  {duration(measures.wall_seconds)} wall-clock, " + (
            f"{measures.window_used_fraction:.1%} of its {duration(measures.window_seconds)} window"
        )
        if measures.inputs:
            line += (
                f"; {measures.inputs_per_second:,.1f} inputs/s on {measures.device} "
                f"({measures.backend or 'torch'} {measures.dtype}), "
                f"{measures.cost_per_1k_inputs:.6f} {measures.currency} "
                "per 1k inputs (estimated)"
            )
        print(line)
        upkeep = summaries[LAND.name].summary.indexes
        for name, reason in (upkeep.built if upkeep else {}).items():
            print(f"  index {name} built: {reason}")
        for name, reason in (upkeep.failed if upkeep else {}).items():
            print(f"  index {name} NOT built: {reason} (the next land tries again; doctor)")
    return _held_deletions(summaries[LAND.name]) or _unread(pipeline, run_id, measures)


def _run_declared(ctx: CommandContext, args: argparse.Namespace) -> int:
    """A kind the configuration declares (`products:`): one partition's five stages on the
    frame, then its review, printed in the product's own nouns (its land's metadata)."""
    kind = kind_named(args.kind, ctx.config)
    key = args.partition or args.collection
    product = product_for_partition(kind, ctx.product_env(args), key)
    partition = product.partition(key)
    run_id = args.run_id or str(uuid.uuid4())
    runners = ctx.runners(args)  # loaded only if the product's executor runs a model
    summaries = _run_partition(partition, run_id, runners, args)
    review = product.review(runners)
    land = partition.stages[-1]
    landed = summaries[land.name]
    if args.json:
        stages = {stage.name: summaries[stage.name].metadata() for stage in partition.stages}
        print(
            to_json(
                {
                    "run_id": run_id,
                    "product": product.name,
                    **stages,
                    "measures": landed.measures.metadata(),
                    "generation": review.metadata(),
                }
            )
        )
    else:
        counts = ", ".join(
            f"{value} {name.replace('_', ' ')}"
            for name, value in landed.metadata().items()
            if isinstance(value, int) and not name.startswith("deletions_held")
        )
        print(f"run {run_id} of {product.name}: {counts}")
        print(f"  generation {review.generation}: {review.decision} ({review.reason})")
    return _held_deletions(landed, land.asset)


def _run_partition(partition, run_id: str, runners, args: argparse.Namespace) -> dict:  # noqa: ANN001
    """A partition's five stages as `run`'s flags ask, with progress on stderr and a line
    while another run holds the partition; the stages' summaries."""
    progress, interval = _progress_sink(sys.stderr)
    return partition.run(
        run_id,
        lambda: runners(partition.model),
        options=_execute_options(args),
        doc_ids=args.doc_ids,
        trigger=args.trigger,
        allow_mass_delete=args.allow_mass_delete,
        progress=progress,
        progress_interval=interval,
        on_wait=lambda holder: _on_wait(holder, partition.partition),
    )


HELD_DELETIONS_EXIT = 3
UNREAD_EXIT = 4


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


def _unread(pipeline: IndexPartition, run_id: str, measures: RunMeasures) -> int:
    """Exit status 4, and a line, when the run could not read too much of its source."""
    excess = pipeline.unread_excess(run_id, measures.attempted)
    if excess is None:
        return 0
    print(
        f"batch-pipeline: {excess}; what did read has landed; `batch-pipeline failures` "
        "lists the rest with their reasons, and the next run retries them",
        file=sys.stderr,
    )
    return UNREAD_EXIT


def _held_deletions(landed: Landing, asset: str = LAND.asset) -> int:
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
