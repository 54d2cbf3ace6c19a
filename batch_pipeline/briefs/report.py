"""The document briefs in `batch-pipeline status` and `doctor`: briefs in the live generation
against the documents of its last full pass, failing documents, the last run, the prompt and
model, the generations and the table's health. `doctor` also checks the collection's source.
"""

from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.health.freshness import utc_time
from batch_pipeline.health.tables import table_damage
from batch_pipeline.reports.text import doctor_line, generations_line, table_summary, text
from batch_pipeline.sources import SourceUnavailableError

KIND = "document_briefs"


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
        "kind": KIND,
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
        "kind": KIND,
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
        problems.append(
            f"{live.documents - briefs} of {live.documents} documents have no brief in the live "
            "generation (batch-pipeline failures says why; the next run retries them)"
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
