"""Does the LanceDB table agree with the tracking store? Same documents, chunk ids and hashes.

Each landed document's tracking row keeps a digest of its chunks (chunk id, input hash and
fingerprint); the table's rows give the same digest. A full run uses the differences to
converge: documents whose rows do not match are prepared again, and documents that only the
table knows are deleted if the source no longer has them. So a manual LanceDB restore or a
lost tracking database ends in a correct table, never a silently wrong one.

Both sides stream into on-disk buckets by doc id and are compared one bucket at a time, so
memory stays flat however many rows the table holds.
"""

import hashlib
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from batch_pipeline.state.spill import BucketSpill, bucket_count, hash_buckets
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore

BUCKET_ROWS = 16384  # table rows per bucket, about
KEY_COLUMNS = ["doc_id", "chunk_id", "input_hash", "model_fingerprint"]


def chunk_digest(chunks: Iterable[tuple[str, str, str]]) -> str:
    """Digest of a document's (chunk_id, input_hash, model_fingerprint) triples."""
    digest = hashlib.sha256()
    for triple in sorted(chunks):
        digest.update("\x1f".join(triple).encode())
        digest.update(b"\x1e")
    return digest.hexdigest()


@dataclass
class ReconcileReport:
    documents_tracked: int = 0
    documents_indexed: int = 0
    only_in_index: list[str] = field(default_factory=list)
    only_in_tracking: list[str] = field(default_factory=list)
    chunk_mismatch: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.only_in_index or self.only_in_tracking or self.chunk_mismatch)

    def metadata(self) -> dict[str, object]:
        return {
            "documents_tracked": self.documents_tracked,
            "documents_indexed": self.documents_indexed,
            "only_in_index": self.only_in_index[:20],
            "only_in_tracking": self.only_in_tracking[:20],
            "chunk_mismatch": self.chunk_mismatch[:20],
        }


def reconcile_index(store: VectorStore, tracking: TrackingStore, index: str) -> ReconcileReport:
    """Compare the table's rows with tracking's chunk digests, document by document."""
    rows = store.count_rows(index)
    buckets = bucket_count(rows, BUCKET_ROWS)
    report = ReconcileReport()
    with tempfile.TemporaryDirectory(prefix="batch-pipeline-reconcile-") as scratch:
        indexed = BucketSpill(
            scratch, "indexed", pa.schema([(c, pa.string()) for c in KEY_COLUMNS])
        )
        for batch in store.scan_batches(index, KEY_COLUMNS):
            indexed.add(batch, hash_buckets(batch["doc_id"].to_pylist(), buckets))
        tracked = BucketSpill(
            scratch, "tracked", pa.schema([("doc_id", pa.string()), ("chunk_digest", pa.string())])
        )
        for page in tracking.iter_documents(index, ["doc_id", "chunk_digest"]):
            ids = [doc_id for doc_id, _ in page]
            table = pa.table({"doc_id": ids, "chunk_digest": [digest for _, digest in page]})
            tracked.add(table, hash_buckets(ids, buckets))
        indexed.close()
        tracked.close()
        for bucket in range(buckets):
            _compare_bucket(indexed.read(bucket), tracked.read(bucket), report)
    for found in (report.only_in_index, report.only_in_tracking, report.chunk_mismatch):
        found.sort()
    return report


def _compare_bucket(
    indexed_rows: pa.Table, tracked_rows: pa.Table, report: ReconcileReport
) -> None:
    indexed: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    columns = [indexed_rows[c].to_pylist() for c in KEY_COLUMNS]
    for doc_id, chunk_id, input_hash, fingerprint in zip(*columns, strict=True):
        indexed[doc_id].append((chunk_id, input_hash, fingerprint))
    tracked = dict(
        zip(
            tracked_rows["doc_id"].to_pylist(),
            tracked_rows["chunk_digest"].to_pylist(),
            strict=True,
        )
    )
    report.documents_indexed += len(indexed)
    report.documents_tracked += len(tracked)
    report.only_in_index.extend(d for d in indexed if d not in tracked)
    report.only_in_tracking.extend(d for d in tracked if d not in indexed)
    report.chunk_mismatch.extend(
        d for d, digest in tracked.items() if d in indexed and digest != chunk_digest(indexed[d])
    )
