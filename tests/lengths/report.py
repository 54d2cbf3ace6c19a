"""The lengths product in `status` and `doctor`."""

from batch_pipeline.reports.text import doctor_line, generations_line, table_summary
from tests.lengths.product import LengthProduct

REPORT_KIND = "document_lengths"


def product_status(product: LengthProduct) -> dict[str, object]:
    live = product.registry.live(product.name)
    current = product.registry.get(product.name, product.fingerprint)
    reader = live.index_name if live else None
    return {
        "product": product.name,
        "kind": REPORT_KIND,
        "collection": product.collection_name,
        "generation": product.index,
        "generation_state": current.state if current else "not built",
        "live_table": reader,
        "documents_bucketed": product.store.count_rows(reader) if reader else 0,
        "documents": live.documents if live else 0,
        "failing_documents": product.tracking.failure_count(reader) if reader else 0,
        "source_error": None,
    }


def product_health(product: LengthProduct) -> dict[str, object]:
    status = product_status(product)
    reader = status["live_table"]
    problems = []
    if reader is None:
        problems.append(f"no live generation yet: run it ({product.reviewer.no_live_hint})")
    elif status["documents_bucketed"] < status["documents"]:
        problems.append(f"{status['documents'] - status['documents_bucketed']} unbucketed")
    return {
        **status,
        **product.store.table_health(reader),
        "problems": problems,
        "healthy": not problems,
    }


def status_lines(rows: list[dict[str, object]], currency: str) -> list[str]:
    lines = []
    for r in rows:
        lines.append(
            f"{r['product']} (document lengths of {r['collection']}): "
            f"{r['documents_bucketed']:,} of {r['documents']:,} documents bucketed; "
            f"{r['failing_documents']} failing"
        )
        lines.append(generations_line(r))
    return lines


def health_line(r: dict[str, object]) -> str:
    return doctor_line(
        r, f"{r['documents_bucketed']} of {r['documents']} bucketed", table_summary(r)
    )
