"""`batch-pipeline batches`: the provider's batches in flight, stuck and ended badly
(`health.provider_batches`); `batches drop ID --yes` gives one up, so that the next run
sends its requests again (and, with `--api-base`, cancels it at the provider first)."""

import argparse

from batch_pipeline.cli.context import CommandContext, to_json
from batch_pipeline.config import ConfigError
from batch_pipeline.config.secrets import masked_url
from batch_pipeline.executors.batch_api import BatchApiSettings
from batch_pipeline.executors.batch_client import NotFound
from batch_pipeline.executors.registry import batch_client
from batch_pipeline.health.provider_batches import batch_views
from batch_pipeline.state.tracking import DROPPED, FINAL_STATUSES, GIVEN_UP, ProviderBatch


def add_commands(commands: argparse._SubParsersAction) -> None:
    batches = commands.add_parser(
        "batches",
        help="the provider's batches (a Batch API executor's): in flight, stuck, ended badly",
    )
    batches.add_argument("--json", action="store_true", help="print JSON")
    actions = batches.add_subparsers(dest="action")
    drop = actions.add_parser(
        "drop", help="give up a batch: the next run sends its requests again (confirm --yes)"
    )
    drop.add_argument("batch_id")
    drop.add_argument("--yes", action="store_true", help="confirm: without it, only says what")
    drop.add_argument(
        "--api-base",
        help="the Batch API holding it: cancel it there first, so it is not billed",
    )
    drop.add_argument(
        "--api-key-env",
        default=None,
        help="the environment variable holding the API key (with --api-base; default the "
        "provider's: OPENAI_API_KEY, ANTHROPIC_API_KEY)",
    )


def batches(ctx: CommandContext, args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "drop":
        return _drop(ctx, args)
    views = batch_views(ctx.tracking)
    if args.json:
        print(to_json([v.as_dict() for v in views]))
        return 0
    if not views:
        print("no provider batch in flight, and none ended without its answers this week")
        return 0
    for view in views:
        print(view.line())
    return 0


def _drop(ctx: CommandContext, args: argparse.Namespace) -> int:
    """Exit 0 when dropped, 1 when it only said what it would do."""
    batch = ctx.tracking.provider_batch(args.batch_id)
    if batch is None:
        raise ConfigError(
            f"no provider batch {args.batch_id!r} is recorded (batch-pipeline batches lists them)"
        )
    if batch.status == GIVEN_UP:
        return _cancel_given_up(batch, args)
    if batch.collected_at is not None:
        raise ConfigError(
            f"provider batch {batch.batch_id} was already collected ({batch.status}) by run "
            f"{batch.collected_by}: nothing to drop"
        )
    plan = (
        f"give up provider batch {batch.batch_id} ({batch.generation}, {batch.partition}, "
        f"{batch.requests} requests, {batch.status}): the next run sends its requests again"
    )
    if not args.yes:
        print(f"would {plan}; run again with --yes to do it")
        return 1
    cancelled = ""
    if args.api_base and not batch.creating and batch.status not in FINAL_STATUSES:
        api = BatchApiSettings(api_base=args.api_base, api_key_env=args.api_key_env)
        client_type = batch_client(batch.wire)
        with client_type.opened(api, api.api_key(client_type.key_env)) as client:
            client.cancel(batch.batch_id)
        cancelled = "; cancelled at the provider"
    elif batch.status not in FINAL_STATUSES:
        cancelled = (
            "; it may still run at the provider, and be billed: cancel it there (or drop "
            "with --api-base)"
        )
    ctx.tracking.collect_provider_batch(
        batch.batch_id, DROPPED, "operator", "dropped by an operator (batch-pipeline batches drop)"
    )
    print(f"dropped: {plan}{cancelled}")
    return 0


def _cancel_given_up(batch: ProviderBatch, args: argparse.Namespace) -> int:
    """A batch already given up (its requests were sent again): with `--api-base`, cancelled
    at the provider it was sent to, where it may still run and bill."""
    if not args.api_base:
        sent = f" (it was sent to {batch.api_base})" if batch.api_base else ""
        raise ConfigError(
            f"provider batch {batch.batch_id} was given up by run {batch.collected_by}: its "
            f"requests were sent again. Where it may still run{sent}, --api-base ADDRESS "
            "cancels it there"
        )
    plan = f"cancel provider batch {batch.batch_id} (given up) at {masked_url(args.api_base)}"
    if not args.yes:
        print(f"would {plan}; run again with --yes to do it")
        return 1
    api = BatchApiSettings(api_base=args.api_base, api_key_env=args.api_key_env)
    client_type = batch_client(batch.wire)
    with client_type.opened(api, api.api_key(client_type.key_env)) as client:
        try:
            client.cancel(batch.batch_id)
        except NotFound:
            raise ConfigError(
                f"the Batch API at {api.shown_base} has no batch {batch.batch_id}: nothing to "
                "cancel there"
            ) from None
    print(f"cancelled: {plan[len('cancel ') :]}")
    return 0


COMMANDS = {"batches": batches}
