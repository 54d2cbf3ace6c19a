"""Related documents in `batch-pipeline status`, `doctor` and a run's lines: lists in the
live generation against the documents of the live index, what scores them, the last run and
the generations."""

from batch_pipeline.declaration import RunReport
from batch_pipeline.generations.review import NoLiveGenerationError
from batch_pipeline.health.freshness import utc_time
from batch_pipeline.related.prepare import stale_by_version
from batch_pipeline.related.product import RelatedProduct
from batch_pipeline.reports.text import doctor_line, generations_line, table_summary

REPORT_KIND = "related_documents"


def product_status(product: RelatedProduct) -> dict[str, object]:
    """Lists, documents, what scores them, the last run and the generations."""
    live = product.registry.live(product.name)
    reader = live.index_name if live is not None else None
    try:
        generation = product.index
        current = product.registry.get(product.name, product.fingerprint)
        state, decision = (current.state, current.decision) if current else ("not built", None)
        scored_by = product.model.name
    except NoLiveGenerationError:
        generation, state, decision, scored_by = "(none)", "waiting for the index", None, None
    last = product.tracking.last_run(reader) if reader else None
    stale = _stale_lists(product, reader)
    return {
        "product": product.name,
        "kind": REPORT_KIND,
        "collection": product.collection_name,
        "generation": generation,
        "generation_state": state,
        "generation_decision": decision,
        "live_table": reader,
        "lists": live.documents if live is not None else 0,
        "stale_lists": stale,
        "scored_by": scored_by,
        "last_run_id": last["run_id"] if last else None,
        "last_landed_at": utc_time(last["finished_at"]) if last else None,
        "source_error": None,
    }


def _stale_lists(product: RelatedProduct, reader: str | None) -> int | None:
    """How many of the documents in the live index have a list missing or built from other
    versions (a run killed mid-land leaves some), in the generation being built where there
    is one, else the live one; None before the index is live."""
    try:
        live_index = product.live_index_reader()
        table = product.index if product.store.has_table(product.index) else reader
    except NoLiveGenerationError:
        return None
    landed = product.landed_lists(table) if table is not None else {}
    changed, listing = stale_by_version(live_index.versions(), landed)
    return len(changed) + len(listing)


def product_health(product: RelatedProduct) -> dict[str, object]:
    """What `doctor` reports: a live generation that lists every document, and its table."""
    status = product_status(product)
    reader = status["live_table"]
    problems = []
    if reader is None:
        problems.append(f"no live generation yet: {product.no_live_hint}")
    elif status["generation_state"] == "building":
        problems.append(
            f"generation {status['generation']} is building: the next run of "
            f"{product.collection_name} lists what is left"
        )
    return {
        **status,
        **product.store.table_health(reader),
        "problems": problems,
        "healthy": not problems,
    }


def status_lines(rows: list[dict[str, object]], currency: str) -> list[str]:
    lines = []
    for r in rows:
        scored = f"scored by {r['scored_by']}" if r["scored_by"] else "not built yet"
        stale = r.get("stale_lists")
        stale_text = (
            f"; {stale:,} lists stale (the next run of {r['collection']} rebuilds them)"
            if stale
            else ""
        )
        lines.append(
            f"{r['product']} (related documents of {r['collection']}): {r['lists']:,} "
            f"documents listed{stale_text}; {scored}; last run {r['last_run_id'] or '(none)'}"
        )
        lines.append(generations_line(r))
    return lines


def health_line(r: dict[str, object]) -> str:
    return doctor_line(r, f"{r['lists']} documents listed", table_summary(r))


def _unused_executor(product: RelatedProduct) -> list[str]:
    """Where the run named an executor that had nothing to run, a line saying so."""
    chosen = product.execution
    if product.reranker is not None or chosen is None or chosen.name is None:
        return []
    return [
        f"  {chosen.spelled('executor')} {chosen.name} was not used: no reranker is live, so "
        "the candidates' own scores ordered the lists (it scores them once a reranker "
        "generation is promoted)"
    ]


def run_lines(product: RelatedProduct, report: RunReport) -> list[str]:
    """A run: the lists it scored (and why they were stale), its clock and cost, the review."""
    prepared = report.stage_metadata().get("prepare", {})
    why = (
        f" ({prepared.get('stale_changed', 0)} changed, "
        f"{prepared.get('stale_listing_changed', 0)} listing a changed or deleted document, "
        f"{prepared.get('stale_neighbours', 0)} neighbours of a changed one)"
        if prepared
        else ""
    )
    lines = [
        f"run {report.run_id} of {report.product}: {report.counts_line()}{why}; scored by "
        f"{product.model.name}",
        *_unused_executor(product),
        *report.batches_lines(),
        report.measures_line(),
        report.review_line(),
    ]
    scores = report.review.scores.get("candidate")
    if scores:
        k = product.settings.k
        lines.append(
            f"  the pages' own links: recall@{k} {scores[f'link_recall_at_{k}']:.3f}, "
            f"MRR@{k} {scores[f'link_mrr_at_{k}']:.3f} over {scores['documents']} pages"
        )
    return lines
