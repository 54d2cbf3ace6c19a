"""The vector index's own commands of the `batch-pipeline` CLI (its runs are `run`'s, as every
product's).

    batch-pipeline search "how do I reset my password" --collection handbook -k 5 [--rerank]
        [--json]
    batch-pipeline restore --collection C --before-run RUN_ID
"""

import argparse
import json
import textwrap

from batch_pipeline.cli.context import CommandContext
from batch_pipeline.generations.registry import GenerationRegistry
from batch_pipeline.generations.run_history import restore_before_run
from batch_pipeline.index.kind import INDEX
from batch_pipeline.index.search import search
from batch_pipeline.reports.text import printable
from batch_pipeline.state.retrieval import MODES


def add_commands(commands: argparse._SubParsersAction) -> None:
    """`search` and `restore`."""
    find = commands.add_parser("search", help="the chunks best ranked for a query")
    find.add_argument("query")
    find.add_argument("--collection", required=True)
    find.add_argument("-k", type=int, default=5, help="number of results (default 5)")
    find.add_argument(
        "--mode",
        choices=MODES,
        help="vector (embedding), text (BM25) or hybrid (both, fused by reciprocal rank); "
        "default: the collection's index.search",
    )
    find.add_argument(
        "--where",
        help="filter on metadata fields, e.g. \"product = 'billing' AND draft = false\"",
    )
    find.add_argument(
        "--rerank",
        action="store_true",
        help="reorder hybrid search's top candidates with the collection's reranker, once its "
        "review has promoted it (otherwise says why, in one line)",
    )
    find.add_argument("--json", action="store_true", help="print JSON")

    restore = commands.add_parser("restore", help="restore the live table to before a run")
    restore.add_argument("--collection", required=True)
    restore.add_argument("--before-run", required=True, dest="run_id")


def _search(ctx: CommandContext, args: argparse.Namespace) -> int:
    (name,) = ctx.collections(args.collection)  # a ConfigError naming the configured ones
    collection = ctx.product_of(INDEX, name).product
    hits = search(
        collection, args.query, args.k, where=args.where, mode=args.mode, rerank=args.rerank
    )
    if args.json:
        print(json.dumps([h.as_dict() for h in hits], indent=2))
        return 0
    if not hits:
        print("no results")
    for hit in hits:  # names and texts come from the source: printed escaped
        print(f"{hit.rank}. {hit.score:.4f}  {printable(hit.doc_id)}  [{printable(hit.chunk_id)}]")
        where = " > ".join(printable(p) for p in (hit.title, hit.section) if p)
        if where:
            print(f"   {where}")
        if hit.metadata:
            pairs = sorted(hit.metadata.items())
            print("   " + ", ".join(printable(f"{k}={v}") for k, v in pairs))
        flat = " ".join(hit.text.split())
        snippet = textwrap.shorten(printable(flat), width=220, placeholder=" ...")
        print(textwrap.indent(textwrap.fill(snippet, 96), "   "))
    return 0


def _restore(ctx: CommandContext, args: argparse.Namespace) -> int:
    result = restore_before_run(
        ctx.tracking, ctx.store, GenerationRegistry(ctx.tracking), args.collection, args.run_id
    )
    print(
        f"{result.index}: restored version {result.restored_version} "
        f"(now version {result.version}); the next full run re-lands what the source has"
    )
    return 0


# the index's own commands, by name (`INDEX.commands` names this module)
COMMANDS = {"search": _search, "restore": _restore}
