"""The lengths product's land: the stale documents' buckets written inside `runs.landing`,
deleting only what its mass-deletion guard allows."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from batch_pipeline.runs.landing import LandedRun, RunOutcome, StageFiles
from batch_pipeline.runs.request import RunRequest
from batch_pipeline.state.staging import read_table, stage_summary
from batch_pipeline.state.tracking import FailureRecord
from batch_pipeline.state.vector_store import commit_with_retries, in_filter

if TYPE_CHECKING:
    from tests.lengths.partition import LengthPartition

TABLE = pa.schema(
    [
        ("doc_id", pa.string()),
        ("partition", pa.string()),
        ("bucket", pa.int32()),
        ("size", pa.int64()),
        ("input_hash", pa.string()),
        ("run_id", pa.string()),
        ("fingerprint", pa.string()),
    ]
)


@dataclass
class LengthLandSummary:
    landed: int = 0
    deleted: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    def metadata(self) -> dict[str, object]:
        return {
            "documents_landed": self.landed,
            "documents_deleted": self.deleted,
            "documents_failed": len(self.failed),
        }


def land_lengths(
    partition: "LengthPartition", run: LandedRun, request: RunRequest, files: StageFiles
) -> LengthLandSummary:
    """The stale documents' buckets merged into the table in one commit, with the deletions
    the frame's guard allows; failures and the registry recorded."""
    product, run_id = partition.product, request.run_id
    product.record()
    facts = stage_summary(files.prepared)
    executed = read_table(files.executed, ["input_hash", "bucket"])
    buckets = dict(zip(*(c.to_pylist() for c in executed.columns), strict=True))
    summary = LengthLandSummary()
    deleted = list(facts["deleted"])
    if run.hold_deletions(len(deleted), int(facts["stale"])) is not None:
        deleted = []
    rows = [  # by document: two documents with one content each get their own row
        {
            "doc_id": r["doc_id"],
            "partition": partition.partition,
            "bucket": buckets[r["input_hash"]],
            "size": r["size"],
            "input_hash": r["input_hash"],
            "run_id": run_id,
            "fingerprint": partition.fingerprint,
        }
        for r in read_table(files.prepared).to_pylist()
        if r["stale"] and r["input_hash"] in buckets
    ]
    table = partition.store.open(partition.index) or partition.store.create_table(
        partition.index, TABLE
    )
    merge = table.merge_insert("doc_id").when_matched_update_all()
    merge = merge.when_not_matched_insert_all()
    if deleted:
        merge = merge.when_not_matched_by_source_delete(in_filter("doc_id", deleted))
    if rows or deleted:
        commit_with_retries(table, lambda: merge.execute(pa.Table.from_pylist(rows, TABLE)))
    summary.landed, summary.deleted = len(rows), len(deleted)
    summary.failed = dict(facts["unread"])
    partition.tracking.forget_failures(partition.index, [r["doc_id"] for r in rows] + deleted)
    partition.tracking.record_failures(
        partition.index,
        [
            FailureRecord(d, "prepare", "unreadable", "UnreadableDocument", why)
            for d, why in sorted(summary.failed.items())
        ],
        run_id,
    )
    total = partition.store.count_rows(partition.index)
    if facts["full_pass"]:
        product.registry.update(
            product.name,
            partition.fingerprint,
            rows=total,
            documents=int(facts["documents"]),
            full_pass=True,
        )
    else:
        product.registry.update(product.name, partition.fingerprint, rows=total)
    run.outcome = RunOutcome(
        counts={"documents_bucketed": len(rows), "documents_deleted": len(deleted)},
        attempted=len(rows) + len(deleted) + len(summary.failed),
        failed=len(summary.failed),
        deleted=len(deleted),
        partition_inputs=total,
        table_version=table.version,
    )
    return summary
