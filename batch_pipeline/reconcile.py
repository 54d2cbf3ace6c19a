"""Does the LanceDB table agree with the tracking store? Same documents, chunk ids and hashes.

Each landed document's tracking row keeps a digest of its chunks (chunk id, input hash and
fingerprint); the table's rows give the same digest. A full run uses the differences to
converge: documents whose rows do not match are prepared again, and documents that only the
table knows are deleted if the source no longer has them. So a manual LanceDB restore or a
lost tracking database ends in a correct table, never a silently wrong one.
"""

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from batch_pipeline.tracking import TrackingStore
from batch_pipeline.vector_store import VectorStore


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


def reconcile_index(
    store: VectorStore, tracking: TrackingStore, collection: str
) -> ReconcileReport:
    tracked = tracking.chunk_digests(collection)
    rows = store.scan(collection, ["doc_id", "chunk_id", "input_hash", "model_fingerprint"])
    indexed: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    columns = [
        rows[c].to_pylist() for c in ("doc_id", "chunk_id", "input_hash", "model_fingerprint")
    ]
    for doc_id, chunk_id, input_hash, fingerprint in zip(*columns, strict=True):
        indexed[doc_id].append((chunk_id, input_hash, fingerprint))
    both = set(tracked) & set(indexed)
    return ReconcileReport(
        documents_tracked=len(tracked),
        documents_indexed=len(indexed),
        only_in_index=sorted(set(indexed) - set(tracked)),
        only_in_tracking=sorted(set(tracked) - set(indexed)),
        chunk_mismatch=sorted(d for d in both if tracked[d] != chunk_digest(indexed[d])),
    )
