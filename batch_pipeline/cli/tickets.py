"""The ticket product's commands of the `batch-pipeline` CLI.

    batch-pipeline intents --day 2026-11-29 [--examples N] [--json]
    batch-pipeline classify "I was charged twice this month" [--subject S] [--json]
    batch-pipeline run --day 2026-11-29 [--trigger schedule] [--json]   (`run`'s, no Dagster)

Readers use the live generation; before one exists, `intents` says how to build it.
"""

import argparse
import json

from batch_pipeline.arguments import whole_number
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.reports.text import printable
from batch_pipeline.tickets.kind import TICKETS
from batch_pipeline.tickets.product import TicketProduct
from batch_pipeline.tickets.report import classifier_line, day_report, evaluation_line


def add_commands(commands: argparse._SubParsersAction) -> None:
    """`intents` and `classify` (`run --day` is `run`'s)."""
    intents = commands.add_parser(
        "intents", help="one day's intent mix, unknown rate, confidence and examples"
    )
    intents.add_argument("--day", required=True, help="the day (YYYY-MM-DD)")
    intents.add_argument(
        "--examples",
        type=whole_number(0),
        default=2,
        metavar="N",
        help="examples per intent (default 2)",
    )
    intents.add_argument("--json", action="store_true", help="print JSON")
    classify = commands.add_parser("classify", help="the top three intents of one ticket")
    classify.add_argument("text", help="the ticket's body")
    classify.add_argument("--subject", default="", help="the ticket's subject")
    classify.add_argument("--json", action="store_true", help="print JSON")


def intents(product: TicketProduct, args: argparse.Namespace) -> int:
    report = day_report(product, args.day, args.examples)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['day']}: {report['tickets']} tickets classified under {report['generation']} "
        f"(taxonomy {report['taxonomy_version']}); {report['failed']} rows failed"
    )
    if not report["tickets"]:
        return 0
    spread = report["confidence"]
    print(
        f"unknown rate {report['unknown_rate']:.1%}; confidence mean {spread['mean']:.3f}, "
        f"p10 {spread.get('p10', spread['mean']):.3f}, p50 {spread.get('p50', spread['mean']):.3f}"
        f", p90 {spread.get('p90', spread['mean']):.3f}"
    )
    if report["shift"] is not None:
        print(f"mix shift against the trailing days: {report['shift']:.3f} (total variation)")
    print(classifier_line(report["classifier"]))
    print(evaluation_line(report["evaluation"]))
    print()
    for name, count in report["counts"].items():
        share = count / report["tickets"]
        print(f"{name:<24} {count:>5}  {share:6.1%}  {'#' * round(share * 60)}")
        for example in report["examples"].get(name, []):
            text = printable(" ".join(example["text"].split()))  # a ticket's text, escaped
            print(f"    {example['confidence']:.2f}  {text[:90]}{'...' if len(text) > 90 else ''}")
    return 0


def classify(product: TicketProduct, args: argparse.Namespace) -> int:
    record = product.live().record
    # the home's measurements, export and int8 calibration sample, as the runs that built it
    embedder = EmbeddingRunner(
        product.classifier.model_for(record),
        calibration_cache=product.storage.home / CALIBRATION_FILE,
    )
    (prediction,) = product.classify_texts([(args.subject, args.text)], embedder, record)
    if args.json:
        print(
            json.dumps(
                {
                    "intent": prediction.intent,
                    "confidence": prediction.confidence,
                    "top": [{"intent": n, "score": s} for n, s in prediction.top],
                    "generation": record.index_name,
                },
                indent=2,
            )
        )
        return 0
    print(f"{prediction.intent}  ({record.index_name})")
    for rank, (name, score) in enumerate(prediction.top, start=1):
        print(f"  {rank}. {score:.4f}  {name}")
    return 0


# the ticket product's own commands, by name (`TICKETS.commands` names this module)
COMMANDS = {
    "intents": lambda ctx, args: intents(ctx.kind_product(TICKETS).product, args),
    "classify": lambda ctx, args: classify(ctx.kind_product(TICKETS).product, args),
}
