"""The tracking store (SQLite or PostgreSQL): landed documents, pending changes, failures,
runs, generations and the audit log, batches handed to a provider, and the landing lease."""

from batch_pipeline.state.tracking.document_records import LandedDocument
from batch_pipeline.state.tracking.failure_records import (
    CONTENT_FAILURE_REASONS,
    TRANSIENT_FAILURE_REASONS,
    UNLISTABLE,
    UNREACHABLE,
    UNREAD_FAILURE_REASONS,
    FailureRecord,
    is_quarantined,
)
from batch_pipeline.state.tracking.generation_records import AuditEntry, GenerationRecord
from batch_pipeline.state.tracking.lease import HeldLease, LeaseLostError, LockTimeoutError
from batch_pipeline.state.tracking.provider_batches import (
    CREATING,
    DROPPED,
    FINAL_STATUSES,
    GIVEN_UP,
    ProviderBatch,
)
from batch_pipeline.state.tracking.run_records import RunRecord
from batch_pipeline.state.tracking.store import TrackingStore, TrackingUnavailableError

__all__ = [
    "CREATING",
    "DROPPED",
    "FINAL_STATUSES",
    "GIVEN_UP",
    "ProviderBatch",
    "CONTENT_FAILURE_REASONS",
    "TRANSIENT_FAILURE_REASONS",
    "UNLISTABLE",
    "UNREAD_FAILURE_REASONS",
    "UNREACHABLE",
    "is_quarantined",
    "AuditEntry",
    "FailureRecord",
    "GenerationRecord",
    "LandedDocument",
    "HeldLease",
    "LeaseLostError",
    "LockTimeoutError",
    "RunRecord",
    "TrackingStore",
    "TrackingUnavailableError",
]
