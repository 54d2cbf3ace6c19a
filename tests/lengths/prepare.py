"""The lengths product's prepare: which of the collection's documents are stale under the
generation, and which landed ones the source no longer lists."""

import hashlib
import time
from typing import TYPE_CHECKING

import pyarrow as pa

from batch_pipeline.runs.request import RunRequest, StageOutput
from batch_pipeline.stages.collect import CHANGED, FAILED, NEW, QUARANTINED, UNCHANGED
from batch_pipeline.state.staging import StagePath, StageWriter, read_table
from tests.lengths.executor import Counted

if TYPE_CHECKING:
    from tests.lengths.partition import LengthPartition

PREPARED = pa.schema(
    [
        ("doc_id", pa.string()),
        ("input_hash", pa.string()),
        ("size", pa.int64()),
        ("stale", pa.bool_()),
    ]
)
LIVE = (NEW, CHANGED, UNCHANGED)


def prepare_lengths(
    partition: "LengthPartition", request: RunRequest, collected: StagePath
) -> StageOutput:
    """Each live document's input hash (its content and the generation's fingerprint) and
    whether it is stale; on a full pass, the landed documents the source no longer lists."""
    started = time.perf_counter()
    out = partition.path(request.run_id, partition.stages[1].file)
    landed = partition.landed_keys()
    columns = ["doc_id", "status", "content_hash", "size", "error_reason"]
    present, unread, prepared = set(), {}, []
    for row in read_table(collected, columns).to_pylist():
        if row["status"] in (FAILED, QUARANTINED):  # still in the source: not deleted
            present.add(row["doc_id"])
            unread[row["doc_id"]] = f"unreadable: {row['error_reason'] or row['status']}"
        if row["status"] not in LIVE or not row["content_hash"]:
            continue
        present.add(row["doc_id"])
        key = hashlib.sha256(f"{row['content_hash']}:{partition.fingerprint}".encode()).hexdigest()
        stale = landed.get(row["doc_id"]) != key
        prepared.append(
            {"doc_id": row["doc_id"], "input_hash": key, "size": row["size"], "stale": stale}
        )
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
