"""One partition's pipeline, stage by stage, in plain Python.

`PartitionPipeline` binds a partition (a collection, or one shard of it) to its configuration
and storage, and runs the five stages (`batch_pipeline.stages`); the Dagster assets, the CLI
and the tests all go through it. Each stage reads the previous stage's Parquet file and writes
its own under `staging/<partition>/<run_id>/`. The generation the configuration builds is
handled by `GenerationLifecycle`.
"""

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property, partial

from batch_pipeline.config import CollectionConfig, ConfigError, PipelineConfig
from batch_pipeline.generations.lifecycle import (
    EmbedderFor,
    GenerationLifecycle,
    GenerationReview,
    LiveGeneration,
)
from batch_pipeline.generations.registry import GenerationRegistry
from batch_pipeline.health.completeness import partition_completeness
from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.fingerprint import model_fingerprint
from batch_pipeline.inference.models import ResolvedModel, load_tokenizer, resolve_model
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.measures.run import (
    MANUAL,
    BackfillEstimate,
    RunMeasures,
    backfill_estimate,
)
from batch_pipeline.names import generation_index
from batch_pipeline.sources import DocumentSource, PartitionFilter, S3ClientFactory, make_source
from batch_pipeline.stages import COLLECT, EXECUTE, LAND, PLAN, PREPARE
from batch_pipeline.stages.collect import (
    CollectLimits,
    CollectSummary,
    LandedDocuments,
    collect_documents,
)
from batch_pipeline.stages.execute import (
    PLAN_SECONDS,
    ExecuteSummary,
    checkpoints_used,
    execute_plan,
    execute_record,
)
from batch_pipeline.stages.land import (
    DeletionGuard,
    LandingContext,
    LandSummary,
    land_documents,
)
from batch_pipeline.stages.plan import PlanSummary, plan_stale_chunks
from batch_pipeline.stages.prepare import PrepareSummary, prepare_chunks
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.staging import (
    STAGE_SECONDS,
    StagePath,
    collected_at,
    is_full_pass,
    stage_summary,
)
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.text.chunking import ChunkSettings


def configured_generations(config: PipelineConfig) -> dict[str, str]:
    """Each collection's generation under this configuration: the table it builds now."""
    model = resolve_model(config.model)
    return {
        c.name: generation_index(c.name, model_fingerprint(model, c.chunking))
        for c in config.collections
    }


@dataclass(frozen=True)
class StageOutput:
    path: StagePath
    summary: object


class PartitionPipeline:
    """The engine for one partition: a collection, or one shard of it."""

    def __init__(
        self,
        config: PipelineConfig,
        storage: StorageLocations,
        partition: str,
        tracking: TrackingStore | None = None,
        store: VectorStore | None = None,
        s3_client: S3ClientFactory | None = None,
    ) -> None:
        try:
            self.collection: CollectionConfig
            self.collection, self.shard = config.locate(partition)
        except KeyError as error:
            raise ConfigError(str(error.args[0])) from None
        self.partition = partition  # the collection's name, or one shard's ("<name>-s03")
        self.config = config
        self.storage = storage
        self.tracking = tracking or TrackingStore(storage.tracking_url)
        self.store = store or VectorStore(storage.lancedb_uri, storage.storage_options)
        self.staging = storage.staging()
        self.s3_client = s3_client

    @property
    def name(self) -> str:
        return self.collection.name

    def owns(self, doc_id: str) -> bool:
        """Whether a document belongs to this partition (always, unless it is one shard)."""
        return self.shard is None or self.collection.partition_of(doc_id) == self.partition

    def covered_partitions(self) -> list[str]:
        return self.collection.partition_keys() if self.shard is None else [self.partition]

    @cached_property
    def model(self) -> ResolvedModel:
        return resolve_model(self.config.model)

    @cached_property
    def fingerprint(self) -> str:
        return model_fingerprint(self.model, self.collection.chunking)

    @cached_property
    def lifecycle(self) -> GenerationLifecycle:
        """The generation this configuration builds (see `GenerationLifecycle`)."""
        return GenerationLifecycle(
            self.collection,
            self.config.model,
            self.model,
            self.fingerprint,
            self.tracking,
            self.store,
        )

    @property
    def index(self) -> str:
        """This configuration's generation: its LanceDB table and its key in the tracking store.

        A change of model fingerprint starts a new generation beside the live one.
        """
        return self.lifecycle.index

    @cached_property
    def collection_source(self) -> DocumentSource:
        """The whole collection's source (what the publish sensor watches)."""
        return make_source(self.collection.source, self.s3_client)

    @cached_property
    def source(self) -> DocumentSource:
        """This partition's documents: the whole source, or one shard's share of it."""
        if self.shard is None:
            return self.collection_source
        return PartitionFilter(self.collection_source, self.owns, self.partition)

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

    def path(self, run_id: str, stage_file: str) -> StagePath:
        return self.staging.stage_file(self.partition, run_id, stage_file)

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
        summary: CollectSummary = collect_documents(
            self.source,
            LandedDocuments(self.tracking, self.index, self.owns, drifted),
            self.fingerprint,
            out,
            doc_ids,
            self.tracking.failures_by_doc(self.index),
            self.collect_limits(),
            orphans,
            lambda changes: self.tracking.record_pending(self.index, changes),
            started,
        )
        self.tracking.record_failures(self.index, summary.failures, run_id)
        return StageOutput(out, summary)

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

    def plan(
        self, run_id: str, chunks: StagePath, settings: PlanSettings, dtype_bytes: int = 4
    ) -> StageOutput:
        out = self.path(run_id, PLAN.file)
        summary: PlanSummary = plan_stale_chunks(chunks, out, settings, self.model, dtype_bytes)
        return StageOutput(out, summary)

    def checkpoint_dir(self) -> StagePath:
        """Execute checkpoints, shared by the runs of one model fingerprint until landed."""
        return self.staging.checkpoint_dir(self.partition, self.fingerprint)

    def execute(
        self,
        run_id: str,
        plan: StagePath,
        get_runner: Callable[[], Embedder],
        checkpoint_every: int = 8,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> StageOutput:
        """Run the plan; the model is only loaded (by `get_runner`) if there is work.
        `progress` hears how far it got every `progress_interval` seconds."""
        out = self.path(run_id, EXECUTE.file)
        summary: ExecuteSummary = execute_plan(
            plan,
            out,
            get_runner,
            self.model.embedding_dimension,
            self.checkpoint_dir(),
            checkpoint_every,
            progress,
            progress_interval,
        )
        return StageOutput(out, summary)

    def land(
        self,
        run_id: str,
        collected: StagePath,
        chunks: StagePath,
        embeddings: StagePath,
        dimension: int,
        trigger: str = MANUAL,
        retries: int = 0,
        started_at: float | None = None,
        allow_mass_delete: bool = False,
    ) -> LandSummary:
        """Land the run, then record it with its measures (`RunMeasures`): `trigger` says
        what started it, `retries` how many of its steps were retried, `started_at` when it
        started (default: when its collect started). Deletions beyond the mass-deletion
        limits are held back (`LandSummary.deletions_held`) unless `allow_mass_delete`."""
        land_started = time.perf_counter()
        limits = self.config.limits
        guard = DeletionGuard(
            limits.max_delete_fraction,
            limits.max_delete_documents,
            self.documents_held,
            confirmed=allow_mass_delete,
        )
        ctx = LandingContext(
            collection=self.name,
            index=self.index,
            partition=self.partition,
            run_id=run_id,
            model_name=self.model.name,
            fingerprint=self.fingerprint,
            dimension=dimension,
            deletion_guard=guard,
            metadata_fields=dict(self.collection.metadata.fields),
        )
        upkeep = self.config.maintenance
        with self.tracking.landing_lease(self.index, owner=run_id):
            table = self.store.open(self.index)  # under the lease: no commit can come between
            version_before = table.version if table is not None else 0
            self.tracking.record_run_started(
                run_id,
                self.index,
                model_name=self.model.name,
                fingerprint=self.fingerprint,
                table_version_before=version_before,
            )
            summary: LandSummary = land_documents(
                self.store, self.tracking, ctx, collected, chunks, embeddings
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
            # under the lease: concurrent shard runs update the same generation record
            self.lifecycle.track(self.covered_partitions() if is_full_pass(collected) else ())
        summary.reconciled = reconcile_index(self.store, self.tracking, self.index)
        summary.completeness = partition_completeness(
            self.tracking,
            self.index,
            self.config.limits.quarantine_after_failures,
            summary.reconciled,
        )
        executed = execute_record(embeddings)
        seconds = {
            COLLECT.name: stage_summary(collected).get(STAGE_SECONDS),
            PREPARE.name: stage_summary(chunks).get(STAGE_SECONDS),
            PLAN.name: executed.get(PLAN_SECONDS),
            EXECUTE.name: executed.get(STAGE_SECONDS),
            LAND.name: time.perf_counter() - land_started,
        }
        summary.measures = self.measure_run(
            run_id,
            summary,
            executed,
            trigger,
            retries,
            started_at or collected_at(collected),
            {stage: round(float(s), 3) for stage, s in seconds.items() if s is not None},
        )
        self.tracking.record_run(
            run_id,
            self.index,
            model_name=self.model.name,
            fingerprint=self.fingerprint,
            docs_landed=summary.documents_landed,
            docs_deleted=summary.documents_deleted,
            chunks_embedded=summary.chunks_embedded,
            chunks_resumed=summary.chunks_resumed,
            chunks_reused=summary.chunks_reused,
            chunks_superseded=summary.chunks_superseded,
            chunks_removed=summary.chunks_removed,
            table_version=summary.table_version,
            table_version_before=version_before,
            deletions_held=summary.deletions_held,
            **summary.measures.record(),
        )
        self._remove_landed_checkpoints(embeddings)
        self.staging.prune_runs(
            self.partition,
            {run_id, "checkpoints"},
            upkeep.staging_runs_kept,
            finished=lambda run: self.tracking.run_finished(self.index, run),
            unfinished_grace_seconds=upkeep.unlanded_run_retention_hours * 3600,
        )
        return summary

    # ----------------------------------------------------------------- measures

    def measure_run(
        self,
        run_id: str,
        landed: LandSummary,
        executed: dict,
        trigger: str,
        retries: int,
        started_at: float,
        stage_seconds: dict[str, float] | None = None,
    ) -> RunMeasures:
        """The run's measures from what its stages recorded and the prices in force."""
        completeness = landed.completeness
        failed = self.tracking.failed_in_run(self.index, run_id)
        return RunMeasures.from_execute(
            executed,
            self.config,
            trigger,
            partition=self.partition,
            started_at=started_at,
            finished_at=time.time(),
            docs_attempted=(
                landed.documents_landed
                + landed.documents_deleted
                + landed.documents_superseded
                + failed
            ),
            docs_failed=failed,
            retries=retries,
            docs_quarantined=int(completeness["documents_quarantined"]),
            completeness=float(completeness["completeness"]),
            partition_inputs=self.landed_totals()[1],
            stage_seconds=stage_seconds or {},
        )

    def documents_held(self) -> int:
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

    def recent_measures(self, limit: int = 20) -> list[RunMeasures]:
        """The measures of this generation's newest runs on this partition (all shards of a
        whole collection), newest first."""
        rows = self.tracking.partition_runs(self.covered_partitions(), limit, self.index)
        return [m for row in rows if (m := RunMeasures.from_record(row)) is not None]

    def backfill_estimate(self, inputs: int | None = None) -> BackfillEstimate | None:
        """Re-embedding the whole partition (`inputs` chunks; default: counted now) at the
        throughput recent runs measured: would a model change's backfill fit the nightly
        window? None before any run embedded."""
        if inputs is None:
            inputs = self.landed_totals()[1]
        return backfill_estimate(self.recent_measures(), inputs, self.config)

    def _remove_landed_checkpoints(self, embeddings: StagePath) -> None:
        """Drop the checkpoints this run wrote or resumed from: their vectors are landed.

        Folders of runs still executing on this partition are left to them.
        """
        used = checkpoints_used(embeddings)
        if used is None:  # an output written before execute recorded its folders
            self.checkpoint_dir().delete()
            return
        for name in used:
            (self.checkpoint_dir() / name).delete()

    # -------------------------------------------------------------- generations

    @property
    def generations(self) -> GenerationRegistry:
        return self.lifecycle.registry

    def generation(self) -> GenerationRecord:
        """This configuration's generation record (registered on first use)."""
        return self.lifecycle.record()

    def live_generation(self) -> LiveGeneration:
        """The live generation's table and model (what every reader uses)."""
        return self.lifecycle.live()

    def review_generation(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        """Score this generation on the evaluation set and promote it if the gate allows:
        on every call with `force` or `generations.review: every_run`, otherwise only when
        something it depends on changed since the last review (so a no-op run loads no
        model)."""
        every_run = self.config.generations.review == "every_run"
        return self.lifecycle.review(embedder_for, force=force or every_run)

    def nightly_maintenance(
        self, version_retention: timedelta, generation_retention: timedelta, owner: str
    ) -> dict[str, int]:
        """Compact the table, clean up versions older than `version_retention`, and drop
        this collection's generations retired longer than `generation_retention` ago."""
        with self.tracking.landing_lease(self.index, owner=owner):
            done = self.store.maintain(self.index, version_retention)
        dropped = self.lifecycle.drop_expired(generation_retention)
        return {**done, "generations_dropped": len(dropped)}

    def run(
        self,
        run_id: str,
        runner: Embedder | Callable[[], Embedder],
        plan_settings: PlanSettings | None = None,
        doc_ids: list[str] | None = None,
        checkpoint_every: int = 8,
        on_wait: Callable[[str], None] | None = None,
        trigger: str = MANUAL,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
        allow_mass_delete: bool = False,
    ) -> dict[str, object]:
        """All five stages in order (what a Dagster run of one partition does); their
        summaries by stage name.

        `runner` may be a loaded model or a function that loads one only if there is work.
        The partition's run lease is held throughout: a second run of the partition waits
        for the first (`on_wait` hears who holds it) and then finds only what is still stale.
        (Dagster runs of a partition are queued one at a time by the run coordinator.)
        `trigger` is recorded with the run's measures; `progress` hears how prepare and
        execute get on; `allow_mass_delete` confirms deletions beyond the limits.
        """
        started_at = time.time()
        get_runner = runner if callable(runner) else (lambda: runner)
        with self.tracking.partition_lease(self.partition, owner=run_id, on_wait=on_wait):
            collected = self.collect(run_id, doc_ids)
            chunks = self.prepare(run_id, collected.path, progress, progress_interval)
            plan = self.plan(run_id, chunks.path, plan_settings or PlanSettings())
            embeddings = self.execute(
                run_id, plan.path, get_runner, checkpoint_every, progress, progress_interval
            )
            landed = self.land(
                run_id,
                collected.path,
                chunks.path,
                embeddings.path,
                self.model.embedding_dimension,
                trigger=trigger,
                started_at=started_at,
                allow_mass_delete=allow_mass_delete,
            )
        return {
            COLLECT.name: collected.summary,
            PREPARE.name: chunks.summary,
            PLAN.name: plan.summary,
            EXECUTE.name: embeddings.summary,
            LAND.name: landed,
        }
