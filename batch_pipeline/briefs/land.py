"""Land for briefs: the valid outputs parsed into typed rows, deletions applied, in commits
of `LAND_GROUP` briefs (the last with the deletions), so memory holds one group. Deletions
the run frame's mass-deletion guard holds back are not applied: those briefs stay.

An output that is invalid (not finished, not JSON, not the schema) is that document's failure
under its key: greedy decoding would give it again, so it is tried again only once its key
moves. A prompt the plan refused (`max_model_len`) or the engine refused is the engine's or
its settings' failure, not the document's: it is recorded without its key, and the next run
tries it again (after the setting is raised, it is generated). A landed brief stays either
way.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from batch_pipeline.briefs.store import BriefStore, brief_fields, brief_schema
from batch_pipeline.config.output_schema import OutputSchema
from batch_pipeline.state.staging import StagePath, read_batches, read_table, stage_summary

LAND_GROUP = 2000  # briefs per commit: memory holds one group, not the run


@dataclass(frozen=True)
class BriefLineage:
    """What every row of a run records of where it came from."""

    collection: str
    partition: str
    prompt_version: str
    schema_version: str
    model_name: str
    model_fingerprint: str
    run_id: str


@dataclass
class BriefLandSummary:
    landed_ids: list[str] = field(default_factory=list)
    deleted_ids: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # doc_id -> why
    failed_keys: dict[str, str] = field(default_factory=dict)  # doc_id -> its staleness key
    table_version: int | None = None
    batches_pending: int = 0  # a provider's batches still running: the next run lands them

    def metadata(self) -> dict[str, object]:
        return {
            "briefs_landed": len(self.landed_ids),
            "briefs_deleted": len(self.deleted_ids),
            "briefs_failed": len(self.failed),
            "batches_pending": self.batches_pending,
        }


def land_briefs(
    prepared_path: StagePath | Path,
    executed_path: StagePath | Path,
    store: BriefStore,
    index: str,
    output: OutputSchema,
    lineage: BriefLineage,
    hold_deletions: Callable[[int, int], str | None],
) -> BriefLandSummary:
    """Land a run's briefs into the generation's table (see the module docstring).
    `hold_deletions(deleting, adding)` is the run frame's mass-deletion guard: the reason
    the deletions are held back, or None."""
    documents = {
        row["input_hash"]: row
        for row in read_table(
            prepared_path,
            ["input_hash", "doc_id", "title", "content_hash", "truncated", "control_tokens"],
        ).to_pylist()
    }
    prepared = stage_summary(prepared_path)
    deleted = list(prepared.get("deleted") or [])
    summary = BriefLandSummary()
    # weighed before anything lands; the stale documents bound the new ones from above
    if hold_deletions(len(deleted), int(prepared.get("stale") or 0)) is not None:
        deleted = []  # those briefs stay; the frame records what it held back
    schema = brief_schema(output)
    rows: list[dict] = []

    def commit(gone: list[str]) -> None:
        nonlocal rows
        table = pa.Table.from_pylist(rows, schema=schema)
        summary.table_version = store.replace(index, table, gone, output)
        summary.landed_ids += [r["doc_id"] for r in rows]
        rows = []

    outputs = (row for batch in read_batches(executed_path) for row in batch.to_pylist())
    for out in outputs:
        if len(rows) >= LAND_GROUP:  # one commit per group: each brief lands whole
            commit([])
        doc = documents.get(out["input_hash"])
        if doc is None:
            continue  # a checkpoint of another plan (cannot be: keys include the fingerprint)
        if not out["valid"]:
            summary.failed[doc["doc_id"]] = out["error"] or "invalid output"
            summary.failed_keys[doc["doc_id"]] = out["input_hash"]
            continue
        rows.append(
            {
                "doc_id": doc["doc_id"],
                "collection": lineage.collection,
                "partition": lineage.partition,
                "title": doc["title"],
                "content_hash": doc["content_hash"],
                "input_hash": out["input_hash"],
                "raw_output": out["text"],
                "finish_reason": out["finish_reason"],
                "prompt_tokens": out["prompt_tokens"],
                "output_tokens": out["output_tokens"],
                "truncated": doc["truncated"],
                "control_tokens": doc["control_tokens"],
                "prompt_version": lineage.prompt_version,
                "schema_version": lineage.schema_version,
                "model_name": lineage.model_name,
                "model_fingerprint": lineage.model_fingerprint,
                "run_id": lineage.run_id,
                "generated_at": out["generated_at"] or datetime.now(UTC),
                **brief_fields(out["text"], output),
            }
        )
    executed = stage_summary(executed_path)
    for key, reason in (executed.get("failed") or {}).items():
        doc = documents.get(key)  # refused by the plan: no output row
        if doc is not None:
            summary.failed.setdefault(doc["doc_id"], reason)
            summary.failed_keys.setdefault(doc["doc_id"], key)
    for key in executed.get("not_the_inputs") or ():  # the engine's or a setting's fault:
        doc = documents.get(key)  # recorded without its key, so the next run tries again
        if doc is not None:
            summary.failed_keys.pop(doc["doc_id"], None)
    commit(deleted)  # the last group, with the deletions
    summary.deleted_ids = deleted
    return summary
