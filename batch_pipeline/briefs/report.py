"""The document briefs in `batch-pipeline status` and `doctor`: briefs in the live generation
against the documents of its last full pass, failing documents, the last run, the prompt and
model, the generations and the table's health. `doctor` also checks the collection's source.
"""

from batch_pipeline.briefs.failures import next_run_note
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.declaration import RunReport
from batch_pipeline.health.freshness import utc_time
from batch_pipeline.health.tables import table_damage
from batch_pipeline.measures.progress import duration
from batch_pipeline.reports.text import (
    doctor_line,
    generations_line,
    printable,
    table_summary,
    text,
)
from batch_pipeline.sources import SourceUnavailableError

REPORT_KIND = "document_briefs"


def _live(product: BriefProduct):  # noqa: ANN202 - a GenerationRecord or None
    return product.registry.live(product.name)


def product_status(product: BriefProduct) -> dict[str, object]:
    """Briefs, documents, failures, the last run and the generations."""
    live = _live(product)
    reader = live.index_name if live is not None else None
    current = product.registry.get(product.name, product.fingerprint)
    last = product.tracking.last_run(reader or product.index)
    return {
        "product": product.name,
        "kind": REPORT_KIND,
        "collection": product.collection_name,
        "generation": product.index,
        "generation_state": current.state if current else "not built",
        "generation_decision": current.decision if current else None,
        "live_table": reader,
        "briefs": product.store.count_rows(reader) if reader else 0,
        "documents": live.documents if live is not None else 0,
        "failing_documents": product.tracking.failure_count(reader) if reader else 0,
        "last_run_id": last["run_id"] if last else None,
        "last_landed_at": utc_time(last["finished_at"]) if last else None,
        "prompt_version": product.template.version,
        "model": product.model.name,
        "source_error": None,
    }


def product_health(product: BriefProduct) -> dict[str, object]:
    """What `doctor` reports: whether the collection's source can be read, the live
    generation briefs every document of its last full pass, and its table's health."""
    live = _live(product)
    reader = live.index_name if live is not None else None
    try:
        product.documents_for(product.collection_name).source.check()
        source_error = None
    except SourceUnavailableError as error:
        source_error = str(error)
    briefs = product.store.count_rows(reader) if reader else 0
    health: dict[str, object] = {
        "product": product.name,
        "kind": REPORT_KIND,
        "source_error": source_error,
        "briefs": briefs,
        "documents": live.documents if live is not None else 0,
        **product.store.table_health(reader),
        "failing_documents": product.tracking.failure_count(reader) if reader else 0,
    }
    problems = [f"source unavailable: {source_error}"] if source_error else []
    damage = table_damage(product.store, reader, product.name)
    if damage is not None:
        health.update(table_damaged=damage["table_damaged"])
        problems.append(damage["problem"])
    if live is None:
        problems.append(
            "no live generation yet: run the briefs (batch-pipeline run --collection "
            f"{product.collection_name} --kind briefs)"
        )
    elif briefs < live.documents:
        missing = live.documents - briefs
        failures = product.tracking.failures_by_doc(live.index_name)
        problems.append(
            f"{missing} of {live.documents} documents have no brief in the live generation "
            f"({next_run_note(failures, product.invalid_output_tries, missing)})"
        )
    health["problems"] = problems
    health["healthy"] = not problems
    return health


def status_lines(rows: list[dict[str, object]], currency: str) -> list[str]:
    """The briefs' status in a few lines per collection."""
    lines = []
    for r in rows:
        lines.append(
            f"{r['product']} (document briefs of {r['collection']}): {r['briefs']:,} briefs of "
            f"{r['documents']:,} documents; {r['failing_documents']} failing"
        )
        landed = text(r["last_landed_at"]) if r["last_landed_at"] else "never"
        lines.append(
            f"  last run {r['last_run_id'] or '-'}, landed {landed}; model {r['model']}, "
            f"prompt {r['prompt_version']}"
        )
        lines.append(generations_line(r))
    return lines


def health_line(r: dict[str, object]) -> str:
    """The briefs' doctor verdict in one line (its problems follow it)."""
    return doctor_line(
        r,
        f"{r['briefs']} of {r['documents']} documents briefed",
        table_summary(r),
        f"{r['failing_documents']} failing documents",
    )


def run_json(product: BriefProduct, report: RunReport) -> dict[str, object]:
    """A run of the briefs, as `run --json` prints it: its stages (execute priced at the
    device's hourly price), the documents that failed with why, the measures, the review and
    the question rows it landed after."""
    summaries, landing = report.summaries, report.landing
    price = product.config.cost.device_price(product.generator.device)
    return {
        "run_id": report.run_id,
        "product": report.product,
        "partition": report.partition.partition,
        "generation": product.index,
        "prepare": summaries["prepare"].metadata(),
        "plan": summaries["plan"].metadata(),
        "execute": summaries["execute"].metadata(price),
        "land": landing.metadata(),
        "failed": landing.summary.failed,
        "measures": landing.measures.metadata() if landing.measures is not None else None,
        "review": report.review.metadata(),
        **({"generations_dropped": report.dropped} if report.dropped else {}),
        **report.extra,
    }


def run_lines(product: BriefProduct, report: RunReport) -> list[str]:
    """A run of the briefs in a few lines: briefs generated, landed, deleted and failed; the
    provider's batches or the engine's pace; the clock and cost; the review; the question
    rows."""
    values = run_json(product, report)
    execute, land = values["execute"], values["land"]
    lines = [
        f"run {report.run_id}: {execute['requests_generated']} briefs generated, "
        f"{land['briefs_landed']} landed, {land['briefs_deleted']} deleted, "
        f"{land['briefs_failed']} failed ({product.index})"
    ]
    if product.executor_capabilities.provider_batches:
        lines += report.batches_lines()
    elif execute["requests_generated"]:
        lines.append(
            f"  {execute['output_tokens_per_second']:,.1f} output tokens/s, "
            f"{execute['requests_per_second']:.2f} documents/s on {execute['device']} "
            f"({execute['dtype']}), {duration(execute['seconds'])} generating after "
            f"{duration(execute['engine_load_seconds'])} starting the engine; "
            f"valid {execute.get('valid_share', 0):.1%}"
        )
    measures = report.landing.measures
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
        lines.append(line)
    for doc_id, reason in sorted(report.landing.summary.failed.items())[:10]:
        lines.append(f"  failed: {printable(doc_id)}: {printable(reason)}")
    review = report.review
    scores = (review.scores or {}).get("candidate") or {}
    figures = ", ".join(f"{k} {v:.3f}" for k, v in sorted(scores.items()))
    lines.append(report.review_line())
    if figures:
        lines.append(f"  scores: {figures}")
    questions = report.extra.get("questions")
    if product.settings.index_questions and questions is not None:
        lines.append(f"  {question_line(questions)}")
    return lines


def question_line(found: dict[str, object]) -> str:
    """The question rows' run in one line (`QuestionRows.metadata()`), with the retrieval
    they measured."""
    line = (
        f"question rows: {found['questions_status']}; {found['questions_embedded']} embedded, "
        f"{found['question_rows']} beside the live index"
    )
    scores = found
    pairs = sorted(k.removesuffix("_chunks") for k in scores if k.endswith("_chunks"))
    if pairs:
        line += "; " + ", ".join(
            f"{m} {scores[m + '_chunks']:.3f} -> {scores[m + '_with_questions']:.3f}" for m in pairs
        )
    return line
