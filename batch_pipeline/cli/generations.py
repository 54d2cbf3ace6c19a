"""The commands that change a product's generations or runs: `generations` (list, promote
through the gate, roll back), `invalidate-run` (a run's rows marked stale, re-embedded by the
next run) and `repair` (a damaged table restored to its newest whole version, or dropped
with `--rebuild`; `--yes` confirms)."""

import argparse
import json

from batch_pipeline.cli.context import CommandContext, product_option, to_json
from batch_pipeline.generations.registry import GenerationError, GenerationRegistry, LiveSwitch
from batch_pipeline.generations.run_history import invalidate_run
from batch_pipeline.products import kinds_for, product_targets


def add_commands(commands: argparse._SubParsersAction) -> None:
    gens = commands.add_parser("generations", help="list, promote or roll back generations")
    gen_commands = gens.add_subparsers(dest="action", required=True)
    gen_list = gen_commands.add_parser("list", help="every generation with state and scores")
    product_option(gen_list)
    gen_list.add_argument("--json", action="store_true", help="print JSON")
    promote = gen_commands.add_parser("promote", help="make a generation live (gated)")
    product_option(promote, required=True)
    promote.add_argument("--generation", help="fingerprint; default: the current config's")
    promote.add_argument("--force", action="store_true", help="skip the gate (audited)")
    rollback = gen_commands.add_parser("rollback", help="bring back the previous live one")
    product_option(rollback, required=True)

    invalidate = commands.add_parser(
        "invalidate-run", help="mark a run's rows stale; the next run re-embeds exactly those"
    )
    invalidate.add_argument("run_id")

    repair = commands.add_parser(
        "repair", help="restore a damaged table (data files lost) to its newest whole version"
    )
    product_option(repair, required=True)
    repair.add_argument(
        "--rebuild",
        action="store_true",
        help="when no version is whole: drop the table; the next full run rebuilds it",
    )
    repair.add_argument("--yes", action="store_true", help="confirm: without it, only says what")


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


COMMANDS = {"generations": _generations, "invalidate-run": _invalidate, "repair": _repair}
