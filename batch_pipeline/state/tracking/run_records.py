"""A run's record, typed: what it landed into, what it counted, and its measures.

Every product records its runs the same way (`TrackingStore.record_run`). What a run counted
is the product's own (`counts`, named in its nouns: `documents_landed` and `chunks_embedded`
for the vector index, `tickets_read` and `tickets_classified` for the ticket intents); the
measures (`RunMeasures`) name the unit their attempted, failed and quarantined inputs are in.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from batch_pipeline.measures.run import DOCUMENTS, RunMeasures

# The columns older versions read a run's counts from, and the count each one mirrors. A run
# in documents fills them from its counts; a run in any other unit writes 0 there (they are
# NOT NULL in databases older versions created), and readers take its `counts` instead.
LEGACY_COUNT_COLUMNS: dict[str, str] = {
    "docs_landed": "documents_landed",
    "docs_deleted": "documents_deleted",
    "chunks_embedded": "chunks_embedded",
    "chunks_reused": "chunks_reused",
    "chunks_removed": "chunks_removed",
    "chunks_resumed": "chunks_resumed",
    "chunks_superseded": "chunks_superseded",
}


@dataclass(frozen=True)
class RunRecord:
    """One landed run of one generation."""

    run_id: str
    index: str  # the generation it landed into
    model_name: str
    fingerprint: str  # the generation's fingerprint
    measures: RunMeasures
    counts: dict[str, int] = field(default_factory=dict)  # the product's own, by name
    table_version: int | None = None
    table_version_before: int | None = None
    deletions_held: int = 0

    def columns(self) -> dict[str, Any]:
        """The run's row of `schema.runs`, by column key (without run id and generation)."""
        documents = self.measures.unit == DOCUMENTS
        return {
            "model_name": self.model_name,
            "fingerprint": self.fingerprint,
            "table_version": self.table_version,
            "table_version_before": self.table_version_before,
            "deletions_held": self.deletions_held,
            "counts": json.dumps(self.counts, sort_keys=True),
            **{
                column: int(self.counts.get(count, 0)) if documents else 0
                for column, count in LEGACY_COUNT_COLUMNS.items()
            },
            **self.measures.record(),
        }


def run_counts(row: dict[str, Any]) -> dict[str, int]:
    """What a stored run counted: its `counts`, or for a run recorded before them, the
    document and chunk columns it filled."""
    if row.get("counts"):
        return json.loads(row["counts"])
    return {
        count: int(row[column] or 0)
        for column, count in LEGACY_COUNT_COLUMNS.items()
        if row.get(column) is not None
    }
