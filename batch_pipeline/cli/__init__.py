"""The `batch-pipeline` command line: search, status, runs without Dagster, failures.

    batch-pipeline search "how do I reset my password" --collection handbook -k 5 [--json]
    batch-pipeline status [--product P] [--json]
    batch-pipeline run --collection C | --partition P | --product P [--kind K] [--doc-id ID ...]
    batch-pipeline report [--product P] [--runs N] [--json]
    batch-pipeline failures [--product P] [--json]
    batch-pipeline doctor [--product P] [--json]
    batch-pipeline generations list|promote|rollback [--product P]
    batch-pipeline invalidate-run RUN_ID
    batch-pipeline restore --collection C --before-run RUN_ID
    batch-pipeline repair --product P [--rebuild] [--yes]
    batch-pipeline run --day D | intents --day D | classify "TEXT"   (ticket intents)
    batch-pipeline run --collection C --kind briefs | briefs --collection C   (briefs)

A product is a collection's vector index (named after the collection), its document briefs
(`<collection>_briefs`) or the ticket intents (`tickets.name`); `--product NAME` names one in
every command, and `--kind` (index, briefs) says which of a collection's products `run`
runs. Status, doctor, report, failures and generations cover every product unless one is
named.

Configuration and state come from the same places as the Dagster code location:
`BATCH_PIPELINE_CONFIG` and `BATCH_PIPELINE_HOME` (or `--config` / `--home`).
"""

import argparse
import errno
import importlib
import json
import re
import signal
import sys
import threading
from datetime import datetime
from itertools import groupby
from types import ModuleType

import sqlalchemy as sa

from batch_pipeline.arguments import whole_number
from batch_pipeline.cli import batches as provider_batch_commands
from batch_pipeline.cli.context import CommandContext, to_json
from batch_pipeline.cli.executors import add_executor_flags
from batch_pipeline.cli.run import run_command
from batch_pipeline.config import ConfigError, masked_url
from batch_pipeline.executors import DEFAULT_CHECKPOINT_EVERY
from batch_pipeline.executors.batch_api import ProviderBatchError
from batch_pipeline.executors.run_batch import RunBatchError
from batch_pipeline.generations.registry import GenerationError, GenerationRegistry, LiveSwitch
from batch_pipeline.generations.review import NoLiveGenerationError
from batch_pipeline.generations.run_history import invalidate_run
from batch_pipeline.health.provider_batches import batch_views, of_product
from batch_pipeline.health.provider_batches import problems as batch_problems
from batch_pipeline.health.provider_batches import status_lines as batch_status_lines
from batch_pipeline.inference.batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET
from batch_pipeline.inference.chat_models import ChatModelNotAvailableError
from batch_pipeline.inference.devices import BACKENDS
from batch_pipeline.inference.models import ModelNotAvailableError
from batch_pipeline.measures.report import (
    calibration_line,
    reported_runs,
    run_path,
    trend,
    trend_line,
)
from batch_pipeline.measures.run import MANUAL, TRIGGERS
from batch_pipeline.names import SHARD_MARK
from batch_pipeline.products import KINDS, kinds_for, product_targets
from batch_pipeline.reports.text import printable, table_lines
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.stages.generate import EngineFaultError
from batch_pipeline.state.checkpoints import unlandable_parts
from batch_pipeline.state.tracking import LeaseLostError, LockTimeoutError, TrackingUnavailableError
from batch_pipeline.state.vector_store import TableDamagedError, missing_data_file


def _product_option(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument(
        "--product",
        "--collection",
        dest="product",
        required=required,
        help="one product: a collection (its vector index) or the ticket intents; "
        + ("required" if required else "default: every product"),
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="batch-pipeline", description="Keep a LanceDB vector index fresh; query it."
    )
    parser.add_argument("--config", help="pipeline YAML (default $BATCH_PIPELINE_CONFIG)")
    parser.add_argument("--home", help="state folder (default $BATCH_PIPELINE_HOME)")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not one line"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    status = commands.add_parser("status", help="rows, last run, model and staleness")
    _product_option(status)
    status.add_argument("--json", action="store_true", help="print JSON")

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

    report = commands.add_parser(
        "report", help="the newest runs per partition: throughput, cost, window, failures"
    )
    _product_option(report)
    report.add_argument(
        "--runs",
        type=whole_number(1),
        default=10,
        metavar="N",
        help="runs per partition (default 10)",
    )
    report.add_argument("--json", action="store_true", help="print JSON")

    doctor = commands.add_parser(
        "doctor", help="completeness, index/tracking reconciliation and table health"
    )
    _product_option(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON")

    gens = commands.add_parser("generations", help="list, promote or roll back generations")
    gen_commands = gens.add_subparsers(dest="action", required=True)
    gen_list = gen_commands.add_parser("list", help="every generation with state and scores")
    _product_option(gen_list)
    gen_list.add_argument("--json", action="store_true", help="print JSON")
    promote = gen_commands.add_parser("promote", help="make a generation live (gated)")
    _product_option(promote, required=True)
    promote.add_argument("--generation", help="fingerprint; default: the current config's")
    promote.add_argument("--force", action="store_true", help="skip the gate (audited)")
    rollback = gen_commands.add_parser("rollback", help="bring back the previous live one")
    _product_option(rollback, required=True)

    invalidate = commands.add_parser(
        "invalidate-run", help="mark a run's rows stale; the next run re-embeds exactly those"
    )
    invalidate.add_argument("run_id")

    repair = commands.add_parser(
        "repair", help="restore a damaged table (data files lost) to its newest whole version"
    )
    _product_option(repair, required=True)
    repair.add_argument(
        "--rebuild",
        action="store_true",
        help="when no version is whole: drop the table; the next full run rebuilds it",
    )
    repair.add_argument("--yes", action="store_true", help="confirm: without it, only says what")

    for module in (provider_batch_commands, *kind_commands()):  # a kind's, as declared
        module.add_commands(commands)

    failed = commands.add_parser("failures", help="inputs that failed, with their reason")
    _product_option(failed)
    failed.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _status(ctx: CommandContext, args: argparse.Namespace) -> int:
    products = ctx.products(args.product)
    rows = [product.status() for product in products]
    batches = batch_views(ctx.tracking)
    for product, row in zip(products, rows, strict=True):
        row["provider_batches"] = [v.as_dict() for v in of_product(batches, product.name)]
    if args.json:
        print(to_json(rows))
        return _source_errors(rows)
    lines: list[str] = []
    pairs = list(zip(products, rows, strict=True))
    for _, group in groupby(pairs, key=lambda pair: pair[0].kind):
        members = list(group)
        if lines:
            lines.append("")
        lines += members[0][0].status_lines([r for _, r in members], ctx.config.cost.currency)
    shown = [v for product in products for v in of_product(batches, product.name)]
    if shown:
        lines += ["", *batch_status_lines(shown)]
    print("\n".join(lines))
    return _source_errors(rows)


def _source_errors(reports: list[dict]) -> int:
    """One line per product whose source cannot be read; exit status 2 if any."""
    failed = [r for r in reports if r["source_error"]]
    for r in failed:
        print(
            f"batch-pipeline: {r['product']}: source unavailable: {r['source_error']}",
            file=sys.stderr,
        )
    return 2 if failed else 0


def _report(ctx: CommandContext, args: argparse.Namespace) -> int:
    runs = []
    for product in ctx.products(args.product):
        for group in product.run_groups():
            rows = ctx.tracking.partition_runs(group, args.runs, product=product.name)
            runs += reported_runs(rows)
    summary = trend(runs)
    if args.json:
        print(to_json({"runs": [r.as_dict() for r in runs], "summary": summary}))
        return 0
    if not runs:
        print("no runs with measures yet")
        return 0
    columns = [
        ("partition", "PARTITION"),
        ("started", "STARTED"),
        ("trigger", "TRIGGER"),
        ("inputs", "INPUTS"),
        ("tokens", "TOKENS"),
        ("seconds", "SECONDS"),
        ("fixed_seconds", "FIXED S"),
        ("inputs_per_second", "INPUTS/S"),
        ("path", "PATH"),
        ("cost_per_1k_inputs", "COST/1K"),
        ("window", "WINDOW"),
        ("failed", "FAILED"),
        ("retries", "RETRIES"),
        ("completeness", "COMPLETE"),
    ]
    rows = []
    for run in runs:
        r = run.as_dict()
        window = r["window_used_fraction"]
        rows.append(
            {
                **r,
                "started": datetime.fromisoformat(r["started_at"]).strftime("%Y-%m-%d %H:%M:%S"),
                "cost_per_1k_inputs": (
                    None if r["cost_per_1k_inputs"] is None else f"{r['cost_per_1k_inputs']:.6f}"
                ),
                "window": None
                if window is None
                else f"{window:.1%}" + (" OVERRAN" if r["overran"] else ""),
                "failed": f"{r['failed']}/{r['attempted']} {r['unit']}",
                "completeness": (None if r["completeness"] is None else f"{r['completeness']:.1%}"),
                "path": run_path(r),
            }
        )
    print("\n".join(table_lines(columns, rows)))
    for run in runs:  # where a run measured its path, what it measured
        line = calibration_line(run.measures.calibration)
        if line:
            print(f"{run.run_id}: {line}")
        if run.measures.submitted_by:  # one run in two: its start is the submitting run's
            print(
                f"{run.run_id}: collected the provider batches run {run.measures.submitted_by} "
                "submitted; timed from that run's start"
            )
    print(f"summary: {trend_line(summary)}")
    return 0


def _failures(ctx: CommandContext, args: argparse.Namespace) -> int:
    only = ctx.products(args.product)[0].name if args.product else None
    rows = ctx.tracking.list_failures(collection=only)
    if args.json:
        print(to_json(rows))
        return 0
    if not rows:
        print("no failures")
    for row in rows:
        print(
            f"{row['collection']}  {row['generation']}  {row['doc_id']!r}  {row['stage']}  "
            f"{row['reason']}  "
            f"attempts={row['attempts']}  {printable(row['message'])}"
        )
    return 0


def checkpoint_problems(unlandable: dict[str, int], product: str) -> list[str]:
    """Doctor's lines for the checkpoint parts of `product`'s partitions (staging keys
    `<collection>`, a shard's `<collection>-sNN`, or `<product>/<partition>`) that hold rows
    no table can hold."""
    own = re.compile(rf"{re.escape(product)}({re.escape(SHARD_MARK)}\d+)?")
    return [
        f"checkpoint {path} holds {count} rows whose vectors or scores are not finite "
        "numbers: the next run computes them again, and drops it once it lands"
        for path, count in unlandable.items()
        if own.fullmatch(path.split("/", 1)[0])
    ]


def _doctor(ctx: CommandContext, args: argparse.Namespace) -> int:
    """Exit status 1 when any product has a problem, 2 when a source cannot be read."""
    products = ctx.products(args.product)
    reports = [product.health() for product in products]
    batches = batch_views(ctx.tracking)
    unlandable = unlandable_parts(ctx.storage.staging().root)
    for product, report in zip(products, reports, strict=True):
        stuck = batch_problems(of_product(batches, product.name))
        stuck += checkpoint_problems(unlandable, product.name)
        report["problems"] = [*report["problems"], *stuck]
        report["healthy"] = report["healthy"] and not stuck
    if args.json:
        print(to_json(reports))
    else:
        for product, r in zip(products, reports, strict=True):
            print(product.health_line(r))
            for problem in r["problems"]:
                print(f"  - {problem}")
    return _source_errors(reports) or (0 if all(r["healthy"] for r in reports) else 1)


def _generations(ctx: CommandContext, args: argparse.Namespace) -> int:
    registry = GenerationRegistry(ctx.tracking)
    if args.action == "list":
        only = ctx.products(args.product)[0].name if args.product else None
        records = registry.list_all(only)
        if args.json:
            print(to_json([g.as_dict() for g in records]))
            return 0
        kinds = {kind.name: kind for kind in kinds_for(ctx.config)}
        notes = {t.name: kinds[t.kind].generation_note for t in product_targets(ctx.config)}
        for g in records:
            noted = notes.get(g.product)
            note = noted(json.loads(g.model_config)) if noted else ""
            scores = ", ".join(f"{k} {v:.4f}" for k, v in g.admitting_scores().items())
            print(
                f"{g.product}  {g.fingerprint}  {g.state:<9}  "
                f"complete={bool(g.complete)}  docs={g.documents}  rows={g.rows}  "
                + (f"precision={g.precision}  " if g.precision else "")
                + f"{g.decision or ''}"
                + (f" [{scores}]" if scores else "")
                + (f"  ({note})" if note else "")
            )
        return 0
    (product,) = ctx.products(args.product)
    if args.action == "rollback":
        moved = registry.rollback(product.name)
        print(f"{product.name}: live generation {moved.previous} -> {moved.live}")
        return 0
    fingerprint = args.generation or product.fingerprint
    if registry.get(product.name, fingerprint) is None:
        raise GenerationError(f"product {product.name!r} has no generation {fingerprint}")
    if args.force:
        moved = registry.promote(product.name, fingerprint, "forced by operator")
    else:
        if fingerprint != product.fingerprint:
            raise GenerationError("only the current config's generation can be gated; --force")
        live_before = registry.live(product.name)
        review = product.review(ctx.runners(args), force=True)
        if review.decision != "promoted":
            raise GenerationError(f"not promoted: {review.reason}")
        moved = LiveSwitch(live_before.index_name if live_before else None, product.index)
    print(f"{product.name}: live generation {moved.previous} -> {moved.live}")
    return 0


def _invalidate(ctx: CommandContext, args: argparse.Namespace) -> int:
    result = invalidate_run(ctx.tracking, ctx.store, GenerationRegistry(ctx.tracking), args.run_id)
    print(
        f"run {args.run_id}: {result.rows} rows in {result.documents} documents marked "
        "stale; the next run of their partition re-embeds exactly those"
    )
    return 0


def _repair(ctx: CommandContext, args: argparse.Namespace) -> int:
    """Exit 0 when repaired or nothing to repair; 1 when it only said what it would do. Mends
    the product's live table (its current configuration's before one is live)."""
    (product,) = ctx.products(args.product)
    store, registry = product.store, GenerationRegistry(ctx.tracking)
    live = registry.live(product.name)
    index = live.index_name if live is not None else product.index
    missing = store.damage(index)
    if missing is None:
        print(f"{index}: every data file reads; nothing to repair")
        return 0
    whole = store.newest_whole_version(index)
    if whole is None and not args.rebuild:
        raise GenerationError(
            f"{index}: no version of it is whole; --rebuild --yes drops it, and the next full "
            "run rebuilds it from the source"
        )
    plan = f"drop {index}" if whole is None else f"restore {index} to version {whole}"
    if not args.yes:
        print(f"{index}: {missing} is missing; would {plan}; run again with --yes to do it")
        return 1
    if whole is None:
        store.drop_table(index)
        done = "dropped"
    else:
        now = store.restore_version(index, whole)
        done = f"restored version {whole} (now version {now})"
    registry.record(
        "repair",
        product.name,
        from_index=index,
        to_index=index,
        details={"missing": missing, "version": whole},
    )
    print(f"{index}: {done}; {product.name}'s next full run lands again what the table lacks")
    return 0


def _fault_line(error: BaseException) -> str | None:
    """One line for an infrastructure fault that stopped a command midway (a database that
    stopped answering, a full disk), with what to do; None for anything else."""
    if isinstance(error, sa.exc.SQLAlchemyError):
        cause = str(getattr(error, "orig", None) or error).strip().splitlines()
        first = masked_url(cause[0]) if cause else type(error).__name__
        return (
            f"a database stopped answering ({type(error).__name__}: {first}); what landed is "
            "kept and the next run resumes from its checkpoints: run again once it is back"
        )
    if (missing := missing_data_file(error)) is not None:
        return str(TableDamagedError(missing))
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        where = f" ({error.filename})" if error.filename else ""
        return (
            f"no space left on the device{where}; what landed is kept: free space under the "
            "home or staging folder and run again"
        )
    if isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror or type(error).__name__}{where}"
    return None


class Stopped(BaseException):
    """A signal asked the command to stop (SIGTERM: a scheduler, an operator's kill). Raised
    where the command is, so every lease and temporary file is released on the way out; not
    an `Exception`, so nothing on the way takes it for a failure to handle."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if in_main_thread else None
    try:
        return _main(args)
    except Stopped as stopped:
        print(
            f"batch-pipeline: stopped by {signal.Signals(stopped.signum).name}; what landed "
            "stays and the partition's lease is released: the next run does what is still "
            "stale (execute resumes from its checkpoints)",
            file=sys.stderr,
        )
        return 128 + stopped.signum
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def kind_commands() -> list[ModuleType]:
    """The modules of the product kinds' own commands (`ProductKind.commands`), each with
    `add_commands(subparsers)` and `COMMANDS` (a command's name -> its function)."""
    return [importlib.import_module(kind.commands) for kind in KINDS if kind.commands]


def _main(args: argparse.Namespace) -> int:
    commands = {
        "status": _status,
        "run": run_command,
        "report": _report,
        "failures": _failures,
        "doctor": _doctor,
        "generations": _generations,
        "invalidate-run": _invalidate,
        "repair": _repair,
        **provider_batch_commands.COMMANDS,
        **{name: run for module in kind_commands() for name, run in module.COMMANDS.items()},
    }
    try:
        ctx = CommandContext(args)
        return commands[args.command](ctx, args)
    except (
        ConfigError,
        ModelNotAvailableError,
        NoLiveGenerationError,
        GenerationError,
        SourceUnavailableError,
        TrackingUnavailableError,
        LeaseLostError,
        LockTimeoutError,
        ProviderBatchError,
        RunBatchError,
        ChatModelNotAvailableError,
        EngineFaultError,
        ValueError,
    ) as error:
        if args.debug:
            raise
        print(f"batch-pipeline: {error}", file=sys.stderr)
        return 2
    except (sa.exc.SQLAlchemyError, OSError, RuntimeError) as error:
        line = _fault_line(error)
        if args.debug or line is None:
            raise
        print(f"batch-pipeline: {line} (--debug shows the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
