"""Land for related documents: each stale document's list replaced by its best `k` scored
candidates, and the lists of documents gone from the index deleted (what the frame's guard
clears), `LISTS_PER_COMMIT` documents to a commit (`merge_insert` on the row key, scoped to
those documents), as the index lands its documents: a reader sees each list whole, old or
new.

A list is landed only when every one of its candidates has a score: a document whose pairs a
provider has not answered, or refused, keeps its old list and stays stale for the next run.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from batch_pipeline.iterables import batched
from batch_pipeline.state.staging import StagePath, read_batches
from batch_pipeline.state.vector_store import VectorStore, commit_with_retries, in_filter

LISTS_PER_COMMIT = 500  # documents' lists in one commit (the index's DOCS_PER_COMMIT)

TABLE_SCHEMA = pa.schema(
    [
        pa.field("row_key", pa.string(), nullable=False),  # doc_id and rank
        pa.field("collection", pa.string(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("related_id", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
        pa.field("doc_version", pa.string(), nullable=False),
        pa.field("related_version", pa.string(), nullable=False),
        pa.field("model_name", pa.string(), nullable=False),
        pa.field("model_fingerprint", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("landed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


@dataclass(frozen=True)
class RelatedLineage:
    """What every landed row records of the run that built it."""

    collection: str
    partition: str
    model_name: str
    model_fingerprint: str
    run_id: str


@dataclass
class RelatedLandSummary:
    """What one land did, by document."""

    landed: list[str] = field(default_factory=list)  # lists written
    deleted: list[str] = field(default_factory=list)
    awaiting: list[str] = field(default_factory=list)  # lists with an unscored candidate
    table_version: int | None = None

    def metadata(self) -> dict[str, object]:
        return {
            "lists_scored": len(self.landed),
            "lists_deleted": len(self.deleted),
            "lists_awaiting_scores": len(self.awaiting),
        }


def land_related(
    prepared: StagePath,
    executed: StagePath,
    store: VectorStore,
    index: str,
    k: int,
    stale: list[str],
    deleted: list[str],
    lineage: RelatedLineage,
) -> RelatedLandSummary:
    """Write each stale document's best `k` and delete `deleted`'s lists (see the module
    docstring); `deleted` is what the guard cleared. The prepared pairs are read as a stream,
    in `stale`'s order (prepare writes them so), and `LISTS_PER_COMMIT` lists go to a commit:
    what a land holds is one commit's lists and the run's scores, however large the
    collection."""
    scores: dict[str, float] = {}
    for batch in read_batches(executed, ["input_hash", "score"]):
        scores.update(zip(batch["input_hash"].to_pylist(), batch["score"].to_pylist(), strict=True))
    summary = RelatedLandSummary()
    now = datetime.now(UTC)
    table = store.open(index)
    rows: list[dict] = []
    scope: list[str] = []

    def commit(lists: list[str]) -> None:
        nonlocal table, rows
        if not lists:
            return
        table = table or store.create_table(index, TABLE_SCHEMA)
        merge = table.merge_insert("row_key").when_matched_update_all()
        merge = merge.when_not_matched_insert_all()
        merge = merge.when_not_matched_by_source_delete(in_filter("doc_id", lists))
        batch = pa.Table.from_pylist(rows, TABLE_SCHEMA)
        commit_with_retries(table, lambda: merge.execute(batch))
        rows = []

    for doc_id, found in _candidates_in_order(prepared, stale):
        if any(c["input_hash"] not in scores for c in found):
            summary.awaiting.append(doc_id)
            continue
        best = sorted(found, key=lambda c: (-scores[c["input_hash"]], c["candidate_rank"]))[:k]
        for rank, c in enumerate(best, start=1):
            rows.append(
                {
                    "row_key": f"{doc_id}\x1f{rank}",
                    "collection": lineage.collection,
                    "partition": lineage.partition,
                    "doc_id": doc_id,
                    "related_id": c["related_id"],
                    "rank": rank,
                    "score": scores[c["input_hash"]],
                    "doc_version": c["doc_version"],
                    "related_version": c["related_version"],
                    "model_name": lineage.model_name,
                    "model_fingerprint": lineage.model_fingerprint,
                    "run_id": lineage.run_id,
                    "landed_at": now,
                }
            )
        summary.landed.append(doc_id)
        scope.append(doc_id)
        if len(scope) >= LISTS_PER_COMMIT:
            commit(scope)
            scope = []
    commit(scope)
    for gone in batched(deleted, LISTS_PER_COMMIT):
        commit(gone)
    summary.deleted = list(deleted)
    summary.table_version = table.version if table is not None else None
    return summary


def _candidates_in_order(prepared: StagePath, stale: list[str]) -> Iterator[tuple[str, list[dict]]]:
    """Each stale document with its prepared candidates (none where it has none), in
    `stale`'s order, streamed: prepare wrote each document's pairs together, in that order."""
    columns = [
        "doc_id",
        "related_id",
        "candidate_rank",
        "doc_version",
        "related_version",
        "input_hash",
    ]
    rows = (row for batch in read_batches(prepared, columns) for row in batch.to_pylist())
    row = next(rows, None)
    for doc_id in stale:
        found = []
        while row is not None and row["doc_id"] == doc_id:
            found.append(row)
            row = next(rows, None)
        yield doc_id, found
    if row is not None:
        raise RuntimeError(
            f"the prepared pairs of {row['doc_id']!r} are not in the stale lists' order"
        )
