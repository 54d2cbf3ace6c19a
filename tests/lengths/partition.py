"""One partition of the lengths product as the run frame runs it: collect is the collection's
own, prepare marks the stale documents, the executor buckets them, land writes the rows inside
`runs.landing` and asks its mass-deletion guard before deleting. (For a collection without
shards: the generation counts one partition's documents.)"""

import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from batch_pipeline.declaration import CollectionPartition
from batch_pipeline.runs import (
    LandedRun,
    RunOutcome,
    RunRequest,
    StageFiles,
    StageOutput,
)
from batch_pipeline.stages import COLLECT, Stage
from batch_pipeline.stages.collect import CHANGED, FAILED, NEW, QUARANTINED, UNCHANGED
from batch_pipeline.state.staging import StagePath, StageWriter, read_table, stage_summary
from batch_pipeline.state.tracking import FailureRecord
from batch_pipeline.state.vector_store import commit_with_retries, in_filter
from tests.lengths.executor import Counted, LengthExecutor

if TYPE_CHECKING:
    from tests.lengths.product import LengthProduct

PYTHON = frozenset({"python", "parquet"})
LENGTH_STAGES: tuple[Stage, ...] = (
    COLLECT,  # the collection's own source_documents
    Stage("prepare", "length_inputs", "length_inputs", PYTHON, "mark the stale documents"),
    Stage("plan", "length_plan", "length_plan", PYTHON, "keep each stale input once"),
    Stage("execute", "length_buckets", "length_buckets", PYTHON, "bucket each input by size"),
    Stage("land", "document_lengths", None, frozenset({"lancedb"}), "write the buckets"),
)
PREPARED = pa.schema(
    [("doc_id", pa.string()), ("input_hash", pa.string()), ("size", pa.int64()),
     ("stale", pa.bool_())]
)  # fmt: skip
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
LIVE = (NEW, CHANGED, UNCHANGED)


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


class LengthPartition(CollectionPartition):
    product: "LengthProduct"

    @property
    def stages(self) -> tuple[Stage, ...]:
        return LENGTH_STAGES

    @property
    def executor(self) -> LengthExecutor:
        return LengthExecutor(self.product.settings.buckets)

    def _where(self) -> str:
        return in_filter("partition", [self.partition])  # escaped

    def landed_keys(self) -> dict[str, str]:
        if not self.store.has_table(self.index):
            return {}
        rows = self.store.scan(self.index, ["doc_id", "input_hash"], where=self._where())
        return dict(zip(rows["doc_id"].to_pylist(), rows["input_hash"].to_pylist(), strict=True))

    def landed_inputs(self) -> int:
        if not self.store.has_table(self.index):
            return 0
        return self.store.count_rows(self.index, self._where())

    def prepare_stage(self, request: RunRequest, collected: StagePath) -> StageOutput:
        started = time.perf_counter()
        out = self.path(request.run_id, self.stages[1].file)
        landed = self.landed_keys()
        columns = ["doc_id", "status", "content_hash", "size", "error_reason"]
        present, unread, prepared = set(), {}, []
        for row in read_table(collected, columns).to_pylist():
            if row["status"] in (FAILED, QUARANTINED):  # still in the source: not deleted
                present.add(row["doc_id"])
                unread[row["doc_id"]] = f"unreadable: {row['error_reason'] or row['status']}"
            if row["status"] not in LIVE or not row["content_hash"]:
                continue
            present.add(row["doc_id"])
            key = hashlib.sha256(f"{row['content_hash']}:{self.fingerprint}".encode()).hexdigest()
            stale = landed.get(row["doc_id"]) != key
            prepared.append({"doc_id": row["doc_id"], "input_hash": key, "size": row["size"],
                             "stale": stale})  # fmt: skip
        full_pass = request.doc_ids is None
        deleted = sorted(set(landed) - present) if full_pass else []
        with StageWriter(out, PREPARED, started) as writer:
            writer.write_table(pa.Table.from_pylist(prepared, PREPARED))
            writer.summary = {
                "stale": sum(r["stale"] for r in prepared),
                "documents": len(present),
                "deleted": deleted,
                "unread": unread,
                "full_pass": full_pass,
            }
        return StageOutput(out, Counted(len(prepared)))

    def land(self, run: LandedRun, request: RunRequest, files: StageFiles) -> LengthLandSummary:
        product, run_id = self.product, request.run_id
        product.record()
        facts = stage_summary(files.prepared)
        executed = read_table(files.executed, ["input_hash", "bucket"])
        buckets = dict(zip(*(c.to_pylist() for c in executed.columns), strict=True))
        summary = LengthLandSummary()
        deleted = list(facts["deleted"])
        if run.hold_deletions(len(deleted), int(facts["stale"])) is not None:
            deleted = []
        rows = [  # by document: two documents with one content each get their own row
            {"doc_id": r["doc_id"], "partition": self.partition,
             "bucket": buckets[r["input_hash"]], "size": r["size"],
             "input_hash": r["input_hash"], "run_id": run_id, "fingerprint": self.fingerprint}
            for r in read_table(files.prepared).to_pylist()
            if r["stale"] and r["input_hash"] in buckets
        ]  # fmt: skip
        table = self.store.open(self.index) or self.store.create_table(self.index, TABLE)
        merge = table.merge_insert("doc_id").when_matched_update_all()
        merge = merge.when_not_matched_insert_all()
        if deleted:
            merge = merge.when_not_matched_by_source_delete(in_filter("doc_id", deleted))
        if rows or deleted:
            commit_with_retries(table, lambda: merge.execute(pa.Table.from_pylist(rows, TABLE)))
        summary.landed, summary.deleted = len(rows), len(deleted)
        summary.failed = dict(facts["unread"])
        self.tracking.forget_failures(self.index, [r["doc_id"] for r in rows] + deleted)
        self.tracking.record_failures(
            self.index,
            [FailureRecord(d, "prepare", "unreadable", "UnreadableDocument", why)
             for d, why in sorted(summary.failed.items())],
            run_id,
        )  # fmt: skip
        total = self.store.count_rows(self.index)
        if facts["full_pass"]:
            product.registry.update(
                product.name, self.fingerprint, rows=total,
                documents=int(facts["documents"]), full_pass=True,
            )  # fmt: skip
        else:
            product.registry.update(product.name, self.fingerprint, rows=total)
        run.outcome = RunOutcome(
            counts={"documents_bucketed": len(rows), "documents_deleted": len(deleted)},
            attempted=len(rows) + len(deleted) + len(summary.failed),
            failed=len(summary.failed),
            deleted=len(deleted),
            partition_inputs=total,
            table_version=table.version,
        )
        return summary
