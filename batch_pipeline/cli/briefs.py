"""The document briefs' commands of the `batch-pipeline` CLI.

    batch-pipeline briefs --collection handbook [--doc-id ID ... | --limit N] [--json]
    batch-pipeline run --collection handbook --kind briefs [--trigger T] [--json]
    batch-pipeline run --product handbook_briefs [--trigger T] [--json]
    batch-pipeline run --collection handbook --kind briefs --executor openai-batch \
        --api-base URL [--api-model NAME] [--wait SECONDS]

`run --kind briefs` runs collect (the collection's own), prepare, plan, execute (the chat
model on vLLM, in this process) and land, without Dagster; only stale briefs are generated.
With `briefs.index_questions` it then lands the live briefs' questions as retrieval rows and
prints the live index's recall and MRR without and with them.
"""

import argparse
import json
import sys
import textwrap
import uuid
from collections.abc import Callable

from batch_pipeline.arguments import whole_number
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.briefs.questions import QuestionRows
from batch_pipeline.executors.openai_batch import NAME as OPENAI_BATCH
from batch_pipeline.executors.openai_batch import BatchApiSettings, window_seconds
from batch_pipeline.generations.review import EmbedderFor
from batch_pipeline.measures.progress import ProgressSink, duration
from batch_pipeline.reports.text import printable
from batch_pipeline.runs import Landing

DEFAULT_LIMIT = 20  # briefs `briefs` prints without --doc-id


def add_batch_api_flags(run: argparse.ArgumentParser) -> None:
    """`run`'s flags for the openai-batch executor (`--kind briefs --executor openai-batch`)."""
    api = run.add_argument_group("openai-batch executor")
    api.add_argument("--api-base", help="the Batch API's base URL (a provider's or a gateway's)")
    api.add_argument(
        "--api-model",
        help="the provider's name of the model (default: the chat "
        "model's; another model is another generation)",
    )
    api.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="the environment variable holding the key (default OPENAI_API_KEY)",
    )
    api.add_argument("--completion-window", default="24h", help="default 24h")
    api.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wait at most this long for the batches (default: until done; 0: "
        "submit and return, and collect with the next run)",
    )
    for side in ("input", "output"):
        api.add_argument(
            f"--price-per-million-{side}-tokens",
            type=float,
            default=0.0,
            help=f"the provider's batch price of {side} tokens, for the measures",
        )


def batch_api_of(args: argparse.Namespace) -> BatchApiSettings | None:
    """The openai-batch executor's settings from `run`'s flags; None without --api-base."""
    if getattr(args, "api_base", None) is None:
        return None
    window_seconds(args.completion_window)  # a ConfigError naming the flag's value
    return BatchApiSettings(
        api_base=args.api_base,
        api_key_env=args.api_key_env,
        model=args.api_model,
        completion_window=args.completion_window,
        wait_seconds=args.wait,
        price_per_million_input_tokens=args.price_per_million_input_tokens,
        price_per_million_output_tokens=args.price_per_million_output_tokens,
    )


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


def run_briefs(
    product: BriefProduct,
    args: argparse.Namespace,
    progress: ProgressSink | None,
    interval: float,
    embedder_for: EmbedderFor,
    on_wait: Callable[[str, str], None],
) -> Landing:
    """Run the briefs of the whole collection, or of the shard `--partition` names, then
    review their generation (faithfulness embeds with `embedder_for`'s models);
    `on_wait(holder, partition)` hears a run that holds the partition. Returns the land
    summary and the frame's record of the run."""
    run_id = args.run_id or str(uuid.uuid4())
    generator = product.generator
    partition = product.partition(getattr(args, "partition", None) or product.collection_name)
    summaries = partition.run(
        run_id,
        lambda: generator,
        doc_ids=args.doc_ids,
        trigger=args.trigger,
        progress=progress,
        progress_interval=interval,
        allow_mass_delete=args.allow_mass_delete,
        on_wait=lambda holder: on_wait(holder, partition.partition),
    )
    land = summaries["land"]
    measures = land.measures
    review = product.review(embedder_for)
    questions = product.land_questions(embedder_for, run_id)  # after review: they follow live
    report = {
        "run_id": run_id,
        "generation": product.index,
        "prepare": summaries["prepare"].metadata(),
        "plan": summaries["plan"].metadata(),
        "execute": summaries["execute"].metadata(
            product.config.cost.device_price(generator.device)
        ),
        "land": land.metadata(),
        "failed": land.summary.failed,
        "measures": measures.metadata() if measures is not None else None,
        "review": review.metadata(),
        "questions": questions.metadata(),
    }
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return land
    execute = report["execute"]
    print(
        f"run {run_id}: {execute['requests_generated']} briefs generated, "
        f"{report['land']['briefs_landed']} landed, {report['land']['briefs_deleted']} deleted, "
        f"{report['land']['briefs_failed']} failed ({product.index})"
    )
    if execute["executor"] == OPENAI_BATCH:
        print(
            f"  {execute.get('batches_submitted', 0)} batches submitted, "
            f"{execute.get('batches_collected', 0)} collected, "
            f"{execute.get('batches_pending', 0)} still at the provider"
            + (
                " (the next run collects them, and submits nothing new meanwhile)"
                if execute.get("batches_pending")
                else ""
            )
        )
    elif execute["requests_generated"]:
        print(
            f"  {execute['output_tokens_per_second']:,.1f} output tokens/s, "
            f"{execute['requests_per_second']:.2f} documents/s on {execute['device']} "
            f"({execute['dtype']}), {duration(execute['seconds'])} generating after "
            f"{duration(execute['engine_load_seconds'])} starting the engine; "
            f"valid {execute.get('valid_share', 0):.1%}"
        )
    if measures is not None:
        line = (
            f"  {duration(measures.wall_seconds)} wall-clock, {measures.window_used_fraction:.1%}"
            f" of its {duration(measures.window_seconds)} window"
        )
        if measures.inputs:
            line += (
                f"; {measures.cost_per_1k_inputs:.6f} {measures.currency} per 1k documents "
                "(estimated)"
            )
        print(line)
    for doc_id, reason in sorted(land.summary.failed.items())[:10]:
        print(f"  failed: {printable(doc_id)}: {printable(reason)}")
    scores = (review.scores or {}).get("candidate") or {}
    figures = ", ".join(f"{k} {v:.3f}" for k, v in sorted(scores.items()))
    print(f"  generation {review.generation}: {review.decision}: {review.reason}")
    if figures:
        print(f"  scores: {figures}")
    if product.settings.index_questions:
        print(f"  {question_line(questions)}")
    return land


def question_line(questions: QuestionRows) -> str:
    """The question rows' run in one line, with the retrieval they measured."""
    found = questions.metadata()
    line = (
        f"question rows: {questions.status}; {found['questions_embedded']} embedded, "
        f"{found['question_rows']} beside the live index"
    )
    scores = questions.scores or {}
    pairs = sorted(k.removesuffix("_chunks") for k in scores if k.endswith("_chunks"))
    if pairs:
        line += "; " + ", ".join(
            f"{m} {scores[m + '_chunks']:.3f} -> {scores[m + '_with_questions']:.3f}" for m in pairs
        )
    return line


# the briefs' own commands, by name (`BRIEFS.commands` names this module)
COMMANDS = {"briefs": lambda ctx, args: briefs(ctx.briefs(args.collection, args), args)}
