"""The related documents' own command of the `batch-pipeline` CLI (their runs are `run`'s, as
every product's: `run --collection handbook --kind related`).

    batch-pipeline related account/reset-password.md [--collection handbook] [--json]
"""

import argparse
import json

from batch_pipeline.cli.context import CommandContext
from batch_pipeline.config import ConfigError
from batch_pipeline.related.kind import RELATED
from batch_pipeline.reports.text import printable


def add_commands(commands: argparse._SubParsersAction) -> None:
    related = commands.add_parser("related", help="a document's most related documents")
    related.add_argument("doc_id", help="the document's id in its collection's source")
    related.add_argument(
        "--collection", help="the collection (default: the one collection with related:)"
    )
    related.add_argument("--json", action="store_true", help="print JSON")


def _collection(ctx: CommandContext, given: str | None) -> str:
    """`given`, or the one collection with related documents; a ConfigError otherwise."""
    if given is not None:
        return given
    names = [target.collection for target in RELATED.targets(ctx.config)]
    if not names:
        raise ConfigError(
            "no collection has related documents: add a `related:` section to one (docs/related.md)"
        )
    if len(names) > 1:
        raise ConfigError(
            f"{len(names)} collections have related documents ({', '.join(names)}): "
            "give --collection"
        )
    return names[0]


GONE = "(no longer in the live index: the next related run replaces it)"


def _related(ctx: CommandContext, args: argparse.Namespace) -> int:
    """The live generation's list of one document (what readers use), best first."""
    product = ctx.product_of(RELATED, _collection(ctx, args.collection)).product
    live = product.live()
    rows = product.related_of(args.doc_id, live.index)
    if not rows:
        raise ConfigError(
            f"{args.doc_id!r} has no related documents in {live.index}: it is not in the "
            "collection's live index, or its list is not built yet"
        )
    titles = product.titles([row["related_id"] for row in rows])
    if args.json:
        found = [
            {**row, "title": titles.get(row["related_id"]), "in_index": row["related_id"] in titles}
            for row in rows
        ]
        print(json.dumps(found, indent=2))
        return 0
    print(
        f"{printable(args.doc_id)}: {len(rows)} related documents "
        f"({live.index}, scored by {rows[0]['model_name']})"
    )
    for row in rows:
        # a neighbour deleted since the list landed: said, not an empty title
        title = printable(titles[row["related_id"]]) if row["related_id"] in titles else GONE
        print(f"{row['rank']}. {row['score']:.4f}  {printable(row['related_id'])}  {title}")
    return 0


# the related documents' own commands, by name (`RELATED.commands` names this module)
COMMANDS = {"related": _related}
