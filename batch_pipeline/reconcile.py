"""Does the LanceDB table agree with the tracking store? Same documents, same chunk counts."""

from collections import Counter
from dataclasses import dataclass, field

from batch_pipeline.tracking import TrackingStore
from batch_pipeline.vector_store import VectorStore


@dataclass
class ReconcileReport:
    documents_tracked: int = 0
    documents_indexed: int = 0
    only_in_index: list[str] = field(default_factory=list)
    only_in_tracking: list[str] = field(default_factory=list)
    chunk_count_mismatch: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.only_in_index or self.only_in_tracking or self.chunk_count_mismatch)

    def metadata(self) -> dict[str, object]:
        return {
            "documents_tracked": self.documents_tracked,
            "documents_indexed": self.documents_indexed,
            "only_in_index": self.only_in_index[:20],
            "only_in_tracking": self.only_in_tracking[:20],
            "chunk_count_mismatch": self.chunk_count_mismatch[:20],
        }


def reconcile_index(
    store: VectorStore, tracking: TrackingStore, collection: str
) -> ReconcileReport:
    tracked = tracking.chunk_counts(collection)
    indexed = Counter(store.scan(collection, ["doc_id"])["doc_id"].to_pylist())
    return ReconcileReport(
        documents_tracked=len(tracked),
        documents_indexed=len(indexed),
        only_in_index=sorted(set(indexed) - set(tracked)),
        only_in_tracking=sorted(set(tracked) - set(indexed)),
        chunk_count_mismatch=sorted(
            d for d in set(tracked) & set(indexed) if tracked[d] != indexed[d]
        ),
    )
