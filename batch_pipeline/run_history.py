"""Undoing a run: invalidate what it landed, or restore the table to before it ran."""

import json
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from batch_pipeline.generations import DROPPED, RETIRED, GenerationError, GenerationRegistry
from batch_pipeline.tracking import TrackingStore, documents, runs
from batch_pipeline.vector_store import VectorStore, sql_literal

INVALIDATED = "invalidated"


def _runs(tracking: TrackingStore, run_id: str) -> list[dict]:
    with tracking.engine.connect() as conn:
        return [
            dict(r._mapping) for r in conn.execute(sa.select(runs).where(runs.c.run_id == run_id))
        ]


def invalidate_run(
    tracking: TrackingStore, store: VectorStore, registry: GenerationRegistry, run_id: str
) -> dict[str, int]:
    """Mark every row `run_id` landed as stale; the next run of its partition re-embeds them.

    The rows keep serving until then; their input hash is replaced, so no staleness key
    matches, and their documents are read again.
    """
    touched = _runs(tracking, run_id)
    if not touched:
        raise GenerationError(f"unknown run id {run_id!r}: no run with that id landed anything")
    total_rows, total_docs = 0, 0
    where = f"run_id = {sql_literal(run_id)}"
    for run in touched:
        index = run["collection"]
        rows = store.scan(index, ["doc_id"], where=where)["doc_id"].to_pylist()
        if rows:
            store.open(index).update(where=where, values={"input_hash": INVALIDATED})
        doc_ids = sorted(set(rows))
        with tracking.engine.begin() as conn:
            for start in range(0, len(doc_ids), 500):
                conn.execute(
                    documents.update()
                    .where(
                        documents.c.collection == index,
                        documents.c.doc_id.in_(doc_ids[start : start + 500]),
                    )
                    .values(content_hash="", source_version="")
                )
        total_rows += len(rows)
        total_docs += len(doc_ids)
        registry.record(
            "invalidate_run",
            index.split("__")[0],
            from_index=index,
            to_index=index,
            details={"run_id": run_id, "rows": len(rows), "documents": len(doc_ids)},
        )
    return {"rows": total_rows, "documents": total_docs}


def restore_before_run(
    tracking: TrackingStore,
    store: VectorStore,
    registry: GenerationRegistry,
    collection: str,
    run_id: str,
) -> dict[str, object]:
    """Restore the collection's live table to its version before `run_id` landed."""
    live = registry.live(collection)
    if live is None:
        raise GenerationError(f"collection {collection!r} has no live generation")
    matching = [r for r in _runs(tracking, run_id) if r["collection"] == live["index_name"]]
    if not matching or matching[0]["table_version_before"] is None:
        raise GenerationError(f"run {run_id!r} did not land into the live table of {collection!r}")
    version = int(matching[0]["table_version_before"])
    table = store.open(live["index_name"])
    if version == 0:
        raise GenerationError(f"run {run_id!r} created the table; there is nothing before it")
    table.restore(version)
    registry.record(
        "restore",
        collection,
        from_index=live["index_name"],
        to_index=live["index_name"],
        details={"before_run": run_id, "version": version, "new_version": table.version},
    )
    return {"index": live["index_name"], "restored_version": version, "version": table.version}


def drop_expired_generations(
    store: VectorStore, registry: GenerationRegistry, collection: str, retention: timedelta
) -> list[str]:
    """Drop the tables of generations retired longer than `retention` ago (nightly)."""
    cutoff = (datetime.now(UTC) - retention).timestamp()
    dropped = []
    for generation in registry.list_all(collection):
        if generation["state"] == RETIRED and (generation["retired_at"] or 0) < cutoff:
            if store.has_table(generation["index_name"]):
                store.db.drop_table(generation["index_name"])
            registry.update(collection, generation["fingerprint"], state=DROPPED)
            registry.record(
                "drop",
                collection,
                from_index=generation["index_name"],
                to_index=None,
                details=json.dumps({"retired_at": generation["retired_at"]}),
                actor="nightly",
            )
            dropped.append(generation["index_name"])
    return dropped
