"""The tracking store (SQLite or PostgreSQL): landed documents, pending changes, failures,
runs, generations and the audit log, and the landing lease."""

from batch_pipeline.state.tracking.generation_records import AuditEntry, GenerationRecord
from batch_pipeline.state.tracking.lease import LockTimeoutError
from batch_pipeline.state.tracking.store import FailureRecord, LandedDocument, TrackingStore

__all__ = [
    "AuditEntry",
    "FailureRecord",
    "GenerationRecord",
    "LandedDocument",
    "LockTimeoutError",
    "TrackingStore",
]
