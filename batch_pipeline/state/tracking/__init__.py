"""The tracking store (SQLite or PostgreSQL): landed documents, pending changes, failures,
runs, generations and the audit log, and the landing lease."""

from batch_pipeline.state.tracking.generation_records import AuditEntry, GenerationRecord
from batch_pipeline.state.tracking.lease import LockTimeoutError
from batch_pipeline.state.tracking.run_records import RunRecord
from batch_pipeline.state.tracking.store import (
    CONTENT_FAILURE_REASONS,
    FailureRecord,
    LandedDocument,
    TrackingStore,
    TrackingUnavailableError,
)

__all__ = [
    "CONTENT_FAILURE_REASONS",
    "AuditEntry",
    "FailureRecord",
    "GenerationRecord",
    "LandedDocument",
    "LockTimeoutError",
    "RunRecord",
    "TrackingStore",
    "TrackingUnavailableError",
]
