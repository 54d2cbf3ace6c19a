"""Undoing a run: invalidate what it landed, or restore the table to before it ran."""

from dataclasses import dataclass

from batch_pipeline.generations.registry import GenerationError, GenerationRegistry
from batch_pipeline.names import generation_product
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore, sql_literal

INVALIDATED = "invalidated"


@dataclass(frozen=True)
class Invalidation:
    rows: int
    documents: int


@dataclass(frozen=True)
class Restore:
    index: str
    restored_version: int
    version: int


def invalidate_run(
    tracking: TrackingStore, store: VectorStore, registry: GenerationRegistry, run_id: str
) -> Invalidation:
    """Mark every row `run_id` landed as stale; the next run of its partition re-embeds them.

    The rows keep serving until then; their input hash is replaced, so no staleness key
    matches, and their documents are read again.
    """
    touched = tracking.runs_with_id(run_id)
    if not touched:
        raise GenerationError(f"unknown run id {run_id!r}: no run with that id landed anything")
    total_rows, total_docs = 0, 0
    where = f"run_id = {sql_literal(run_id)}"
    for run in touched:
        index = run["generation"]
        rows = store.scan(index, ["doc_id"], where=where)["doc_id"].to_pylist()
        if rows:
            store.open(index).update(where=where, values={"input_hash": INVALIDATED})
        doc_ids = sorted(set(rows))
        tracking.forget_content(index, doc_ids)
        total_rows += len(rows)
        total_docs += len(doc_ids)
        registry.record(
            "invalidate_run",
            generation_product(index),
            from_index=index,
            to_index=index,
            details={"run_id": run_id, "rows": len(rows), "documents": len(doc_ids)},
        )
    return Invalidation(rows=total_rows, documents=total_docs)


def restore_before_run(
    tracking: TrackingStore,
    store: VectorStore,
    registry: GenerationRegistry,
    collection: str,
    run_id: str,
) -> Restore:
    """Restore the collection's live table to its version before `run_id` landed."""
    live = registry.live(collection)
    if live is None:
        raise GenerationError(f"collection {collection!r} has no live generation")
    matching = [r for r in tracking.runs_with_id(run_id) if r["generation"] == live.index_name]
    if not matching or matching[0]["table_version_before"] is None:
        raise GenerationError(f"run {run_id!r} did not land into the live table of {collection!r}")
    version = int(matching[0]["table_version_before"])
    if version == 0:
        raise GenerationError(f"run {run_id!r} created the table; there is nothing before it")
    table = store.open(live.index_name)
    table.restore(version)
    registry.record(
        "restore",
        collection,
        from_index=live.index_name,
        to_index=live.index_name,
        details={"before_run": run_id, "version": version, "new_version": table.version},
    )
    return Restore(index=live.index_name, restored_version=version, version=table.version)
