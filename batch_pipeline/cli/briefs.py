"""The document briefs' own command of the `batch-pipeline` CLI (their runs are `run`'s, as
every product's: `run --collection handbook --kind briefs`, `run --product handbook_briefs`,
with the executor flags of `cli/executors.py`).

    batch-pipeline briefs --collection handbook [--doc-id ID ... | --limit N] [--json]
"""

import argparse
import json
import sys
import textwrap

from batch_pipeline.arguments import whole_number
from batch_pipeline.briefs.kind import BRIEFS
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.reports.text import printable

DEFAULT_LIMIT = 20  # briefs `briefs` prints without --doc-id


def add_commands(commands: argparse._SubParsersAction) -> None:
    briefs = commands.add_parser("briefs", help="a collection's document briefs")
    briefs.add_argument("--collection", required=True, help="a collection with briefs")
    briefs.add_argument("--doc-id", action="append", dest="doc_ids", help="only these (repeat)")
    briefs.add_argument(
        "--candidate",
        action="store_true",
        help="the current configuration's generation, not the live one readers use",
    )
    briefs.add_argument(
        "--limit",
        type=whole_number(0, zero_means="all"),
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"without --doc-id, the first N briefs by doc id (default {DEFAULT_LIMIT}); 0 "
        "prints every brief, held in memory at once",
    )
    briefs.add_argument("--json", action="store_true", help="print JSON")


def briefs(product: BriefProduct, args: argparse.Namespace) -> int:
    """The live generation's briefs (what readers use), or with `--candidate` the current
    configuration's; a NoLiveGenerationError says how to build one. Without `--doc-id`, the
    first `--limit` by doc id, and how many there are in all."""
    index = product.index if args.candidate else product.live().index
    total = None
    if args.doc_ids or not args.limit:
        rows = product.briefs.rows(index, args.doc_ids)
    else:
        rows = product.briefs.first_rows(index, args.limit)
        total = product.briefs.count(index)
    shown = (
        f"the first {len(rows)} of {total:,} briefs by doc id; --limit 0 prints all"
        if total is not None and total > len(rows)
        else None
    )
    fields = list(product.output.columns)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        if shown:
            print(f"batch-pipeline: {index}: {shown}", file=sys.stderr)
        return 0
    if not rows:
        print(
            f"{index}: no briefs yet; run `batch-pipeline run --collection "
            f"{product.collection_name} --kind briefs`"
        )
        return 0
    versions = sorted({r["prompt_version"] for r in rows})
    print(f"{index}: {shown or f'{len(rows)} briefs'} (prompt {', '.join(versions)})")
    for row in rows:
        cut = " (document cut to fit)" if row["truncated"] else ""
        print(f"\n{printable(row['doc_id'])}{cut}")
        for name in fields:
            value = row[name]
            if isinstance(value, list):
                print(f"  {name}:")
                for item in value:
                    print(
                        textwrap.fill(
                            printable(str(item)),
                            96,
                            initial_indent="    - ",
                            subsequent_indent="      ",
                        )
                    )
            else:
                text = textwrap.fill(f"{name}: {printable(str(value))}", 96)
                print(textwrap.indent(text, "  "))
    return 0


# the briefs' own commands, by name (`BRIEFS.commands` names this module)
COMMANDS = {
    "briefs": lambda ctx, args: briefs(ctx.product_of(BRIEFS, args.collection).product, args)
}
