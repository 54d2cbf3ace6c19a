"""A collection's vector index in `batch-pipeline status` and `doctor`: what is in the index,
when it landed, what is stale, completeness, reconciliation and the table's health."""

from batch_pipeline.declaration import RunReport
from batch_pipeline.health.completeness import partition_completeness
from batch_pipeline.health.freshness import partition_freshness, utc_time
from batch_pipeline.health.tables import damage_report
from batch_pipeline.index.product import IndexProduct
from batch_pipeline.measures.progress import duration
from batch_pipeline.measures.run import BackfillEstimate
from batch_pipeline.reports.text import doctor_line, table_lines, table_summary
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.stages import COLLECT, EXECUTE, LAND, PREPARE
from batch_pipeline.stages.collect import (
    CHANGED,
    DELETED,
    NEW,
    CollectSummary,
    LandedDocuments,
    classify_documents,
)
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.tracking import UNLISTABLE, UNREACHABLE
from batch_pipeline.state.vector_store import missing_data_file

REPORT_KIND = "vector_index"


def collection_status(product: IndexProduct) -> dict[str, object]:
    """Rows, documents, last run and landing time, model, stale source documents and lag.

    Stale means changed at the source (new, edited or deleted) but not yet landed; found by
    listing the source and reading only what looks changed, as the collect stage does. Lag is
    the age of the oldest source change not yet landed, as the sensor and collect recorded it.
    """
    whole = product.partition(product.name)  # every shard: the collection's own partition
    stats = product.store.stats(product.index)
    last = product.tracking.last_run(product.index)
    summary = CollectSummary()
    source_error = None
    try:
        landed = LandedDocuments(product.tracking, product.index)
        failures = product.tracking.failures_by_doc(product.index)
        limits = whole.collect_limits()
        for _ in classify_documents(
            whole.source, landed, product.fingerprint, summary, None, failures, limits
        ):
            pass
    except SourceUnavailableError as error:
        source_error = str(error)
    report = reconcile_index(product.store, product.tracking, product.index)
    # what the table lacks or holds wrongly is stale too, whatever tracking remembers
    missing = len(report.only_in_tracking) + len(report.chunk_mismatch)
    stale = sum(summary.counts.get(s, 0) for s in (NEW, CHANGED, DELETED)) + missing
    live = product.registry.live(product.name)
    generation = product.registry.get(product.name, product.fingerprint)
    backfill = whole.backfill_estimate()
    counted = last["counts"] if last else {}
    return {
        "product": product.name,
        "kind": REPORT_KIND,
        "collection": product.name,
        "live_table": live.index_name if live else None,
        "generation": product.index,
        "generation_state": generation.state if generation else "not built",
        "rows": stats.rows if stats else 0,
        "documents": stats.documents if stats else 0,
        "last_run_id": last["run_id"] if last else None,
        "last_landed_at": utc_time(last["finished_at"]) if last else None,
        "last_run_chunks_embedded": counted.get("chunks_embedded") if last else None,
        "last_run_chunks_resumed": counted.get("chunks_resumed", 0) if last else None,
        "newest_embedded_at": stats.newest_embedded_at if stats else None,
        "model": product.model.name,
        "model_fingerprint": product.fingerprint,
        "models_in_index": stats.models if stats else [],
        "stale_documents": None if source_error else stale,
        "failing_documents": product.tracking.failure_count(product.index),
        "index_mismatch": missing + len(report.only_in_index),
        **partition_freshness(product.tracking, product.index, also_pending=summary.changes),
        **partition_completeness(
            product.tracking,
            product.index,
            product.config.limits.quarantine_after_failures,
            report,
        ),
        **_backfill(backfill),
        "source_error": source_error,
    }


def _backfill(estimate: BackfillEstimate | None) -> dict[str, object]:
    """The backfill estimate's figures (None before any run measured a throughput)."""
    if estimate is None:
        keys = ("backfill_inputs", "backfill_estimate_seconds", "backfill_estimate_cost")
        return {**dict.fromkeys(keys), "backfill_fits_window": None, "window_seconds": None}
    return {**estimate.metadata(), "window_seconds": estimate.window_seconds}


def source_problem(product: IndexProduct) -> str | None:
    """Why the collection's source cannot be listed, or None if it can (reads one entry)."""
    try:
        product.collection_source.check()
        next(iter(product.collection_source.list_entries()), None)
    except SourceUnavailableError as error:
        return str(error)
    return None


def damaged_table_health(product: IndexProduct, missing: str) -> dict[str, object]:
    """What `doctor` reports of a table whose data files are gone: which, the newest whole
    version, and the remedy (nothing else can be read of it)."""
    damage = damage_report(product.store, product.index, product.name, missing)
    return {
        "product": product.name,
        "kind": REPORT_KIND,
        "collection": product.name,
        "source_error": None,
        "table_damaged": damage["table_damaged"],
        "newest_whole_version": damage["newest_whole_version"],
        "problems": [damage["problem"]],
        "healthy": False,
    }


def collection_health(product: IndexProduct) -> dict[str, object]:
    """What `batch-pipeline doctor` reports: completeness, reconciliation and table health."""
    try:  # the reconcile reads every row: a lost data file shows here, with no scan of its own
        report = reconcile_index(product.store, product.tracking, product.index)
    except (RuntimeError, OSError) as error:
        missing = missing_data_file(error)
        if missing is None:
            raise
        return damaged_table_health(product, missing)
    limits = product.config.limits
    completeness = partition_completeness(
        product.tracking, product.index, limits.quarantine_after_failures, report
    )
    source_error = source_problem(product)
    health = {
        "product": product.name,
        "kind": REPORT_KIND,
        "collection": product.name,
        "source_error": source_error,
        **completeness,
        "reconciled": report.ok,
        **report.metadata(),
        **product.store.table_health(product.index),
    }
    problems = [f"source unavailable: {source_error}"] if source_error else []
    failing = product.tracking.failures_by_doc(product.index)
    health["failing_documents"] = len(failing)
    problems += [
        f"{f['message']} (until it can be listed; fix its permissions or the disk)"
        for f in failing.values()
        if f["reason"] == UNLISTABLE
    ]
    unreached = sorted(d for d, f in failing.items() if f["reason"] == UNREACHABLE)
    if unreached:
        problems.append(
            f"{len(unreached)} documents could not be read for a reason that says nothing "
            f"about them (a connection error, a timeout, a 5xx); every run retries them: "
            + ", ".join(repr(d) for d in unreached[:5])
            + (" ..." if len(unreached) > 5 else "")
        )
    if completeness["completeness"] < limits.completeness_threshold:
        problems.append(
            f"completeness {completeness['completeness']:.2%} is below "
            f"{limits.completeness_threshold:.0%}"
        )
    if not report.ok:
        problems.append(
            "index and tracking store disagree (a full run repairs this): "
            f"{len(report.chunk_mismatch)} documents differ, "
            f"{len(report.only_in_index)} only in the index, "
            f"{len(report.only_in_tracking)} only in tracking"
        )
    if product.store.has_table(product.index):
        indexes = product.index_health()
        health["indexes"] = indexes.metadata()
        problems += [
            f"index {problem} (the next land builds it; `run` lands now)"
            for problem in indexes.problems
        ]
    health["problems"] = problems
    health["healthy"] = not problems
    return health


STATUS_COLUMNS = [
    ("collection", "COLLECTION"),
    ("rows", "ROWS"),
    ("documents", "DOCS"),
    ("stale_documents", "STALE"),
    ("lag_seconds", "LAG S"),
    ("failing_documents", "FAILING"),
    ("index_mismatch", "MISMATCH"),
    ("last_run_chunks_embedded", "EMBEDDED"),
    ("last_landed_at", "LAST LANDED"),
    ("last_run_id", "LAST RUN"),
    ("generation_state", "GENERATION"),
    ("model", "MODEL"),
]


def status_lines(rows: list[dict[str, object]], currency: str) -> list[str]:
    """The collections' status as a table, then each one's backfill estimate."""
    lines = table_lines(STATUS_COLUMNS, rows)
    for r in rows:
        if r["backfill_estimate_seconds"] is not None:
            fits = "fits" if r["backfill_fits_window"] else "does NOT fit"
            lines.append(
                f"{r['collection']}: a full rebuild ({r['backfill_inputs']:,} chunks) would take "
                f"about {duration(r['backfill_estimate_seconds'])} and cost about "
                f"{r['backfill_estimate_cost']:.4f} {currency} at the measured "
                f"throughput; it {fits} the {duration(r['window_seconds'])} window"
            )
    return lines


def health_line(r: dict[str, object]) -> str:
    """A collection's doctor verdict in one line (its problems follow it)."""
    if r.get("table_damaged"):
        return doctor_line(r, "its table is damaged")
    return doctor_line(
        r,
        f"completeness {r['completeness']:.2%} ({r['documents_complete']}/"
        f"{r['documents_intended']}, {r['documents_quarantined']} quarantined)",
        table_summary(r),
        f"{r['failing_documents']} failing",
        *([_indexes_text(r["indexes"])] if r.get("indexes") else []),
    )


def _indexes_text(indexes: dict[str, object]) -> str:
    """The table's indexes as doctor's line shows them: how many, and the rows they lack."""
    return f"{indexes['indexes']} indexes, {indexes['unindexed_rows']:,} rows unindexed"


def run_json(report: RunReport) -> dict[str, object]:
    """A run of the index, as `run --json` prints it: every stage, the documents that failed
    in any stage, the measures and the review (and `chunks_embedded`, execute's old name for
    `inputs_embedded`, until the next release: CHANGELOG.md)."""
    values = report.as_dict()
    execute = values[EXECUTE.name]
    execute["chunks_embedded"] = execute["inputs_embedded"]
    values["documents_failed"] = sum(
        values[stage.name]["documents_failed"] for stage in (COLLECT, PREPARE, LAND)
    )
    return values


def run_lines(report: RunReport) -> list[str]:
    """A run of the index in a few lines: what it embedded, landed, deleted and failed; its
    clock and cost; its review; what its land's upkeep did to the table's indexes."""
    values = run_json(report)
    land = values[LAND.name]
    lines = [
        f"run {report.run_id}: {values[EXECUTE.name]['inputs_embedded']} chunks embedded, "
        f"{land['documents_landed']} documents landed, {land['documents_deleted']} deleted, "
        f"{values['documents_failed']} failed",
        *report.batches_lines(),
        report.measures_line(),
        report.review_line(),
        *report.companion_lines(),
    ]
    upkeep = report.landing.summary.indexes
    for name, reason in (upkeep.built if upkeep else {}).items():
        lines.append(f"  index {name} built: {reason}")
    for name, reason in (upkeep.failed if upkeep else {}).items():
        lines.append(f"  index {name} NOT built: {reason} (the next land tries again; doctor)")
    return lines
