"""One partition of the briefs product, as the run frame runs it (`BriefPartition`): its stages, its
land inside the frame, and where its runs are recorded."""

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from batch_pipeline.briefs import BRIEF_STAGES
from batch_pipeline.briefs.failures import final_failures
from batch_pipeline.briefs.land import BriefLandSummary, BriefLineage, land_briefs
from batch_pipeline.briefs.prepare import BriefPrepareSummary, ReadDocument, prepare_briefs
from batch_pipeline.declaration import CollectionPartition
from batch_pipeline.executors.generation import GenerationExecutor
from batch_pipeline.runs.landing import LandedRun, RunOutcome, StageFiles
from batch_pipeline.runs.request import RunRequest, StageOutput
from batch_pipeline.sources.reading import read_document
from batch_pipeline.stages import Stage
from batch_pipeline.state.staging import StagePath, stage_summary
from batch_pipeline.state.tracking import FailureRecord, GenerationRecord

if TYPE_CHECKING:
    from batch_pipeline.briefs.product import BriefProduct


def passes_of(record: GenerationRecord) -> dict[str, int]:
    """The partitions that had a full pass, with the live documents each had then (an older
    record lists only the partitions)."""
    passes = json.loads(record.full_passes or "{}")
    return passes if isinstance(passes, dict) else dict.fromkeys(passes, 0)


class BriefPartition(CollectionPartition):
    """One partition of a collection's briefs, as the frame runs it."""

    product: "BriefProduct"

    @property
    def stages(self) -> tuple[Stage, ...]:
        return BRIEF_STAGES

    @property
    def executor(self) -> GenerationExecutor:
        return self.product.executor

    def landed_inputs(self) -> int:
        """The documents of this partition the generation holds briefs of: what deletions
        are weighed against."""
        if self.whole_collection:
            return self.product.briefs.count(self.index)
        return sum(batch.num_rows for batch in self.landed_keys())

    @property
    def whole_collection(self) -> bool:
        return self.partition == self.product.collection_name

    def landed_keys(self) -> Iterator[pa.RecordBatch]:
        """The generation's (doc_id, input_hash) batches of this partition's documents: all of
        them for the whole collection, one shard's share for a shard."""
        for batch in self.product.briefs.key_batches(self.index):
            if self.whole_collection:
                yield batch
                continue
            owns = self.documents.owns
            yield batch.filter(pa.array([owns(d) for d in batch["doc_id"].to_pylist()]))

    # ------------------------------------------------------------------- stages

    def read_documents(self, doc_ids: list[str]) -> Iterator[ReadDocument]:
        """Documents collect did not read, read from the collection's source as collect
        reads them (`sources.reading`: the size limit, decoding, the source's title)."""
        limit = self.config.limits.max_document_bytes
        for doc_id, result in self.documents.source.read_many(doc_ids):
            read = read_document(doc_id, result, limit)
            if read.error is not None:
                yield ReadDocument(doc_id, error=f"{read.reason}: {read.error}")
                continue
            yield ReadDocument(doc_id, read.title(), read.text)

    def prepare(self, run_id: str, collected: StagePath) -> StageOutput:
        out = self.path(run_id, self.stages[1].file)
        product = self.product
        summary: BriefPrepareSummary = prepare_briefs(
            collected,
            out,
            self.landed_keys(),
            product.briefs.count(self.index),
            final_failures(self.tracking.failures_by_doc(self.index), product.invalid_output_tries),
            self.fingerprint,
            product.template,
            product.settings.document_tokens,
            product.generator,
            self.read_documents,
            product.collection.partition_of,
        )
        return StageOutput(out, summary)

    def land(self, run: LandedRun, request: RunRequest, files: StageFiles) -> BriefLandSummary:
        """Land the run's briefs inside the frame's landing (`StagedPartition.land_stage`),
        deleting only what its mass-deletion guard clears, and record each document's
        failure."""
        product, run_id = self.product, request.run_id
        prepared, executed = files.prepared, files.executed
        lineage = BriefLineage(
            collection=product.collection_name,
            partition=self.partition,
            prompt_version=product.template.version,
            schema_version=product.output.version,
            model_name=product.model.name,
            model_fingerprint=product.model.fingerprint,
            run_id=run_id,
        )
        product.record()
        summary = land_briefs(
            prepared,
            executed,
            product.briefs,
            self.index,
            product.output,
            lineage,
            run.hold_deletions,
        )
        failures = [  # under the key it failed with: not tried again while that holds
            FailureRecord(
                doc_id,
                "execute",
                "invalid_output",
                "InvalidOutput",
                reason,
                content_hash=summary.failed_keys.get(doc_id),
            )
            for doc_id, reason in sorted(summary.failed.items())
        ]
        known = self.tracking.failures_by_doc(self.index) if failures else {}
        rekeyed = [  # a failure under another key counts no try against this one
            f.doc_id
            for f in failures
            if f.doc_id in known and known[f.doc_id].get("content_hash") != f.content_hash
        ]
        gone = summary.landed_ids + summary.deleted_ids + rekeyed
        self.tracking.forget_failures(self.index, gone)
        self.tracking.record_failures(self.index, failures, run_id)
        total = self.store.count_rows(self.index) if self.store.has_table(self.index) else 0
        prepared_summary = stage_summary(prepared)
        self._track(total, prepared_summary)
        run.outcome = RunOutcome(
            counts={
                "briefs_generated": len(summary.landed_ids),
                "briefs_deleted": len(summary.deleted_ids),
                "briefs_failed": len(summary.failed),
                "briefs_in_table": total,
            },
            attempted=len(summary.landed_ids) + len(summary.failed) + len(summary.deleted_ids),
            failed=len(summary.failed),
            deleted=len(summary.deleted_ids),
            partition_inputs=total + len(summary.failed),
            table_version=summary.table_version,
        )
        summary.batches_pending = int(stage_summary(executed).get("pending_batches") or 0)
        return summary

    def _track(self, rows: int, prepared: dict) -> None:
        """Record the generation's rows and, after a full pass, the live documents of each
        partition it covered (briefed, stale, failed under their key before, or unreadable):
        the generation has had a full pass once every partition of the collection has, and
        expects briefs of their documents together. Under the landing lease: concurrent shard
        runs update the one record."""
        product = self.product
        if not prepared.get("full_pass"):
            product.registry.update(product.name, self.fingerprint, rows=rows)
            return
        live = {key: int(n) for key, n in (prepared.get("live") or {}).items()}
        passes = passes_of(product.record()) | dict.fromkeys(self.documents_covered(), 0) | live
        product.registry.update(
            product.name,
            self.fingerprint,
            rows=rows,
            documents=sum(passes.values()),
            full_pass=set(passes) >= set(product.collection.partition_keys()),
            full_passes=json.dumps(passes, sort_keys=True),
        )

    def documents_covered(self) -> list[str]:
        """The partitions this one's full pass covers: every shard for the whole collection."""
        if self.whole_collection:
            return self.product.collection.partition_keys()
        return [self.partition]

    def prepare_stage(self, request: RunRequest, collected: StagePath) -> StageOutput:
        return self.prepare(request.run_id, collected)
