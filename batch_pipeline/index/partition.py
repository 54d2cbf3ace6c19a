"""One partition of a collection's vector index (the collection, or one of its shards), stage
by stage, in plain Python.

`IndexPartition` binds a partition key to its product (`index.product.IndexProduct`: the
collection's configuration, model, generation and stores) and runs the five stages
(`batch_pipeline.stages`); the Dagster assets, the CLI and the tests all go through it. Each
stage reads the previous stage's Parquet file and writes its own under
`staging/<partition>/<run_id>/`.
"""

import time
from collections.abc import Iterator
from datetime import timedelta
from functools import cached_property, partial
from typing import TYPE_CHECKING

from batch_pipeline.config import CollectionConfig, ConfigError
from batch_pipeline.executors.embedding import EmbeddingExecutor
from batch_pipeline.health.completeness import partition_completeness
from batch_pipeline.index.land import (
    LandingContext,
    LandSummary,
    land_documents,
)
from batch_pipeline.index.prepare import PrepareSummary, prepare_chunks
from batch_pipeline.inference.models import load_tokenizer
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.measures.run import (
    DOCUMENTS,
    BackfillEstimate,
    backfill_estimate,
)
from batch_pipeline.runs.landing import LandedRun, RunOutcome, StageFiles
from batch_pipeline.runs.partition import ProductPartition
from batch_pipeline.runs.request import RunRequest, StageOutput
from batch_pipeline.sources import DocumentSource, PartitionFilter
from batch_pipeline.stages import COLLECT, PREPARE, STAGES, Stage
from batch_pipeline.stages.collect import (
    CollectLimits,
    CollectSummary,
    LandedDocuments,
    collect_documents,
)
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.staging import StagePath, is_full_pass
from batch_pipeline.state.tracking import (
    UNLISTABLE,
    UNREAD_FAILURE_REASONS,
)
from batch_pipeline.text.chunking import ChunkSettings

if TYPE_CHECKING:
    from batch_pipeline.index.product import IndexProduct


class IndexPartition(ProductPartition):
    """The vector index's engine for one partition: a collection, or one shard of it."""

    unit = DOCUMENTS
    product: "IndexProduct"

    def __init__(self, product: "IndexProduct", partition: str) -> None:
        super().__init__(product, partition)
        try:
            collection, self.shard = product.config.locate(partition)
        except KeyError as error:
            raise ConfigError(str(error.args[0])) from None
        if collection.name != product.name:
            raise ConfigError(f"partition {partition!r} is not one of collection {product.name!r}")
        self.collection: CollectionConfig = collection
        self.storage = product.storage
        self.staging = product.staging

    @property
    def name(self) -> str:
        return self.collection.name

    @property
    def staging_key(self) -> str:
        """The collections' own staging folders: `staging/<partition>/`."""
        return self.partition

    def owns(self, doc_id: str) -> bool:
        """Whether a document belongs to this partition (always, unless it is one shard)."""
        return self.shard is None or self.collection.partition_of(doc_id) == self.partition

    def covered_partitions(self) -> list[str]:
        return self.collection.partition_keys() if self.shard is None else [self.partition]

    @property
    def executor(self) -> EmbeddingExecutor:
        return self.product.executor

    @property
    def collection_source(self) -> DocumentSource:
        """The whole collection's source (what the publish sensor watches)."""
        return self.product.collection_source

    @cached_property
    def source(self) -> DocumentSource:
        """This partition's documents: the whole source, or one shard's share of it."""
        if self.shard is None:
            return self.collection_source
        return PartitionFilter(self.collection_source, self.owns, self.partition)

    def record_pending(self, changes: dict[str, float | None]) -> None:
        """Note documents seen changed (doc id to when, None: no longer pending), for the
        freshness report, until a run lands them."""
        self.tracking.record_pending(self.index, changes)

    def landed_versions(self) -> Iterator[tuple[str, str]]:
        """(doc id, source version) of every document this generation has landed, streamed."""
        for page in self.tracking.iter_documents(self.index, ["doc_id", "source_version"]):
            yield from page

    def collect_limits(self) -> CollectLimits:
        limits = self.config.limits
        return CollectLimits(limits.max_document_bytes, limits.quarantine_after_failures)

    def chunk_settings(self) -> ChunkSettings:
        chunking = self.collection.chunking
        max_tokens = chunking.max_tokens or self.model.max_seq_length
        if max_tokens > self.model.max_seq_length:
            raise ConfigError(
                f"collections[{self.name}].chunking.max_tokens: {max_tokens} exceeds the model's "
                f"max sequence length {self.model.max_seq_length}"
            )
        return ChunkSettings(
            max_tokens=max_tokens,
            overlap_tokens=chunking.overlap_tokens,
            include_title=chunking.include_title,
            include_headings=chunking.include_headings,
            document_prefix=self.model.document_prefix,
        )

    @property
    def stages(self) -> tuple[Stage, ...]:
        return STAGES

    # ------------------------------------------------------------------- stages

    def collect(self, run_id: str, doc_ids: list[str] | None = None) -> StageOutput:
        started = time.perf_counter()
        self.source.check()  # a missing bucket, table or column fails here, naming the setting
        out = self.path(run_id, COLLECT.file)
        drifted: list[str] = []
        orphans: list[str] = []
        if doc_ids is None:  # a full run also repairs any drift between index and tracking
            self._fill_new_metadata_columns()
            report = reconcile_index(self.store, self.tracking, self.index)
            drifted = report.chunk_mismatch + report.only_in_tracking
            orphans = [d for d in report.only_in_index if self.owns(d)]
        known_failures = self.tracking.failures_by_doc(self.index)
        summary: CollectSummary = collect_documents(
            self.source,
            LandedDocuments(self.tracking, self.index, self.owns, drifted),
            self.fingerprint,
            out,
            doc_ids,
            known_failures,
            self.collect_limits(),
            orphans,
            self.record_pending,
            started,
        )
        self._forget_listed_gaps(summary, doc_ids, known_failures)
        self.tracking.record_failures(self.index, summary.failures, run_id)
        return StageOutput(out, summary)

    def _forget_listed_gaps(
        self, summary: CollectSummary, doc_ids: list[str] | None, known: dict[str, dict]
    ) -> None:
        """A folder (or document) the last listing could not see, that this one saw: its
        failure (among the `known` ones this collect began with) goes; a targeted run looks
        only at the documents it names."""
        unseen = {gap.prefix for gap in summary.gaps}
        looked = None if doc_ids is None else set(doc_ids)
        seen_again = [
            doc_id
            for doc_id, failure in known.items()
            if failure["reason"] == UNLISTABLE
            and doc_id not in unseen
            and (looked is None or doc_id in looked)
        ]
        self.tracking.forget_failures(self.index, seen_again)

    def _fill_new_metadata_columns(self) -> None:
        """Metadata fields declared since the table was built: add their columns, and have
        this run read and re-land every document so they fill in; vectors are reused (the
        model inputs did not change), so nothing is embedded."""
        table = self.store.open(self.index)
        if table is None:
            return
        fields = dict(self.collection.metadata.fields)
        if all(name in table.schema.names for name in (*fields, "metadata")):
            return
        self.store.ensure_table(self.index, self.model.embedding_dimension, fields)
        self.tracking.forget_content(self.index, [doc_id for doc_id, _ in self.landed_versions()])

    def prepare(
        self,
        run_id: str,
        collected: StagePath,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> StageOutput:
        out = self.path(run_id, PREPARE.file)
        summary: PrepareSummary = prepare_chunks(
            collected,
            out,
            partial(load_tokenizer, self.model.path),  # picklable: worker processes load it
            self.chunk_settings(),
            self.fingerprint,
            lambda ids: self.store.chunk_keys(self.index, ids),
            progress=progress,
            progress_interval=progress_interval,
            workers=self.config.prepare.workers,
            min_documents_per_worker=self.config.prepare.min_documents_per_worker,
        )
        self.tracking.record_failures(self.index, summary.failures, run_id)
        return StageOutput(out, summary)

    def checkpoint_dir(self) -> StagePath:
        """Execute checkpoints, shared by the runs of one model fingerprint until landed."""
        return self.staging.checkpoint_dir(self.partition, self.fingerprint)

    def land(self, run: LandedRun, request: RunRequest, files: StageFiles) -> LandSummary:
        """Land the run's documents inside the frame's landing (`StagedPartition.land_stage`),
        asking its mass-deletion guard before deleting; then the table's upkeep, its indexes,
        the generation's record and the partition's completeness, under the landing lease."""
        upkeep, run_id, collected = self.config.maintenance, request.run_id, files.collected
        ctx = LandingContext(
            collection=self.name,
            index=self.index,
            partition=self.partition,
            run_id=run_id,
            model_name=self.model.name,
            fingerprint=self.fingerprint,
            dimension=self.model.embedding_dimension,
            hold_deletions=run.hold_deletions,
            metadata_fields=dict(self.collection.metadata.fields),
        )
        summary: LandSummary = land_documents(
            self.store, self.tracking, ctx, collected, files.prepared, files.executed
        )
        summary.compacted = bool(
            self.store.maintain_if_needed(
                self.index,
                upkeep.max_fragments,
                upkeep.max_versions,
                timedelta(minutes=upkeep.threshold_version_retention_minutes),
            )
        )
        self.tracking.record_failures(self.index, summary.failures, run_id)
        indexes = self.product.indexes()
        if indexes is not None:  # under the lease: one upkeep at a time
            summary.indexes = indexes.keep_current()
        # as this land left them, before another lands (the question rows are landed,
        # and their indexes checked, by the briefs' question_rows under their own lease)
        summary.index_health = self.product.index_health(summary.indexes, (self.index,))
        # under the lease: concurrent shard runs update the same generation record
        self.product.track(self.covered_partitions() if is_full_pass(collected) else ())
        summary.reconciled = reconcile_index(self.store, self.tracking, self.index)
        summary.completeness = partition_completeness(
            self.tracking,
            self.index,
            self.config.limits.quarantine_after_failures,
            summary.reconciled,
        )
        run.outcome = self._outcome(run_id, summary)
        return summary

    def unread_excess(self, run_id: str, attempted: int) -> str | None:
        """Why a landed run read too little of its source to count as a success, or None:
        more of the documents it attempted could not be read (no answer, or refused) than
        `limits.max_unread_fraction` allows. What did read has landed."""
        unread = self.tracking.failed_in_run(self.index, run_id, UNREAD_FAILURE_REASONS)
        bound = self.config.limits.max_unread_fraction
        if not attempted or unread / attempted <= bound:
            return None
        return (
            f"{unread} of the {attempted} documents the run attempted could not be read "
            f"({unread / attempted:.0%}), more than limits.max_unread_fraction ({bound:g})"
        )

    def _outcome(self, run_id: str, landed: LandSummary) -> RunOutcome:
        """What the land counted, in documents and chunks, for the run's record."""
        failed = self.tracking.failed_in_run(self.index, run_id)
        completeness = landed.completeness
        return RunOutcome(
            counts={
                "documents_landed": landed.documents_landed,
                "documents_deleted": landed.documents_deleted,
                "documents_superseded": landed.documents_superseded,
                "chunks_embedded": landed.chunks_embedded,
                "chunks_resumed": landed.chunks_resumed,
                "chunks_reused": landed.chunks_reused,
                "chunks_superseded": landed.chunks_superseded,
                "chunks_removed": landed.chunks_removed,
            },
            attempted=(
                landed.documents_landed
                + landed.documents_deleted
                + landed.documents_superseded
                + failed
            ),
            failed=failed,
            deleted=landed.documents_deleted,
            quarantined=int(completeness["documents_quarantined"]),
            completeness=float(completeness["completeness"]),
            partition_inputs=self.landed_totals()[1],
            table_version=landed.table_version,
        )

    def landed_inputs(self) -> int:
        """Documents this partition holds: as tracking records them, or as the table does
        when tracking knows fewer (a lost tracking database); what deletions are weighed
        against."""
        tracked = self.landed_totals()[0]
        if self.shard is not None:
            return tracked
        stats = self.store.stats(self.index)
        return max(tracked, stats.documents if stats else 0)

    def landed_totals(self) -> tuple[int, int]:
        """Documents and chunks this partition has landed (the chunks are what a full
        rebuild would embed)."""
        if self.shard is None:
            return (
                self.tracking.document_count(self.index),
                self.tracking.chunk_total(self.index),
            )
        documents = chunks = 0
        for page in self.tracking.iter_documents(self.index, ["doc_id", "chunk_count"]):
            for doc_id, count in page:
                if self.owns(doc_id):
                    documents += 1
                    chunks += count
        return documents, chunks

    def measured_partitions(self) -> list[str]:
        """This partition's runs: all its shards' for a whole collection."""
        return self.covered_partitions()

    def backfill_estimate(self, inputs: int | None = None) -> BackfillEstimate | None:
        """Re-embedding the whole partition (`inputs` chunks; default: counted now) at the
        throughput recent runs measured: would a model change's backfill fit the nightly
        window? None before any run embedded."""
        if inputs is None:
            inputs = self.landed_totals()[1]
        return backfill_estimate(self.recent_measures(), inputs, self.config)

    # -------------------------------------------------------------------- a run

    def collect_stage(self, request: RunRequest) -> StageOutput:
        return self.collect(request.run_id, request.doc_ids)

    def prepare_stage(self, request: RunRequest, collected: StagePath) -> StageOutput:
        return self.prepare(request.run_id, collected, request.progress, request.progress_interval)
