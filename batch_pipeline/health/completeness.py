"""Completeness of a partition: landed / (intended - quarantined).

Intended documents are those the pipeline knows at the source: landed ones and failing ones.
A landed document whose newer version is failing does not count as landed; a document that
failed `quarantine_after_failures` times is quarantined and leaves the denominator.
"""

from batch_pipeline.state.tracking import TrackingStore


def partition_completeness(
    tracking: TrackingStore, index: str, quarantine_after_failures: int
) -> dict[str, float | int]:
    """Completeness of generation `index` as tracking records it."""
    landed = tracking.landed_doc_ids(index)
    failing = tracking.failures_by_doc(index)
    quarantined = {d for d, f in failing.items() if f["attempts"] >= quarantine_after_failures}
    intended = landed | set(failing)
    complete = landed - set(failing)
    denominator = len(intended) - len(quarantined)
    return {
        "documents_intended": len(intended),
        "documents_complete": len(complete),
        "documents_quarantined": len(quarantined),
        "completeness": round(len(complete) / denominator, 6) if denominator > 0 else 1.0,
    }
