"""Completeness of a partition: landed / (intended - quarantined).

Intended documents are those the pipeline knows: landed ones, failing ones, and (given a
reconcile report) rows the table holds that tracking does not know. A document counts as
landed only if tracking records it and, given a report, the table holds exactly its chunks:
after a lost LanceDB folder completeness is 0%, not what tracking remembers. A landed document
whose newer version is failing does not count as landed; a document that failed
`quarantine_after_failures` times, for a reason that is not transient, is quarantined and
leaves the denominator.
"""

from batch_pipeline.state.reconcile import ReconcileReport
from batch_pipeline.state.tracking import UNLISTABLE, TrackingStore, is_quarantined


def partition_completeness(
    tracking: TrackingStore,
    index: str,
    quarantine_after_failures: int,
    report: ReconcileReport | None = None,
) -> dict[str, float | int]:
    """Completeness of generation `index`, checked against the table when `report` is given."""
    landed = tracking.landed_doc_ids(index)
    # a folder that could not be listed is no document: its documents keep their rows
    failing = {
        d: f for d, f in tracking.failures_by_doc(index).items() if f["reason"] != UNLISTABLE
    }
    quarantined = {d for d, f in failing.items() if is_quarantined(f, quarantine_after_failures)}
    intended = landed | set(failing)
    complete = landed - set(failing)
    if report is not None:
        complete -= set(report.only_in_tracking) | set(report.chunk_mismatch)
        intended |= set(report.only_in_index)
    denominator = len(intended) - len(quarantined)
    return {
        "documents_intended": len(intended),
        "documents_complete": len(complete),
        "documents_quarantined": len(quarantined),
        "completeness": round(len(complete) / denominator, 6) if denominator > 0 else 1.0,
    }
