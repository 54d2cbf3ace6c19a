"""The commands that read every product's state, naming none: `status` (rows, last run,
model, staleness), `report` (the newest runs per partition: throughput, cost, window,
failures), `failures` (inputs that failed, with their reason) and `doctor` (completeness,
index and tracking reconciliation, table health)."""

import argparse
import re
import sys
from datetime import datetime
from itertools import groupby

from batch_pipeline.arguments import whole_number
from batch_pipeline.cli.context import CommandContext, product_option, to_json
from batch_pipeline.health.provider_batches import batch_views, of_product
from batch_pipeline.health.provider_batches import problems as batch_problems
from batch_pipeline.health.provider_batches import status_lines as batch_status_lines
from batch_pipeline.measures.report import (
    calibration_line,
    reported_runs,
    run_path,
    trend,
    trend_line,
)
from batch_pipeline.names import SHARD_MARK
from batch_pipeline.reports.text import printable, table_lines
from batch_pipeline.state.checkpoints import unlandable_parts


def add_commands(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser("status", help="rows, last run, model and staleness")
    product_option(status)
    status.add_argument("--json", action="store_true", help="print JSON")

    report = commands.add_parser(
        "report", help="the newest runs per partition: throughput, cost, window, failures"
    )
    product_option(report)
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
    product_option(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON")

    failed = commands.add_parser("failures", help="inputs that failed, with their reason")
    product_option(failed)
    failed.add_argument("--json", action="store_true", help="print JSON")


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
    for _, group in groupby(pairs, key=lambda pair: pair[0].report_kind):
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


COMMANDS = {"status": _status, "report": _report, "failures": _failures, "doctor": _doctor}
