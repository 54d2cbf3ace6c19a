"""One collection's pipeline, stage by stage, in plain Python.

`CollectionPipeline` binds a collection's configuration to the storage locations and runs the
five stages; the Dagster assets, the CLI and the tests all go through it. Each stage reads the
previous stage's Parquet file and writes its own under `staging/<collection>/<run_id>/`.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property

from batch_pipeline.chunking import ChunkSettings
from batch_pipeline.collect import (
    CollectLimits,
    CollectSummary,
    LandedDocuments,
    collect_documents,
)
from batch_pipeline.config import CollectionConfig, ConfigError, ModelConfig, PipelineConfig
from batch_pipeline.evaluation import gate, load_eval_set, score_generation
from batch_pipeline.execute import ExecuteSummary, checkpoints_used, execute_plan
from batch_pipeline.fingerprint import generation_index, model_fingerprint, shard_of
from batch_pipeline.generations import (
    BUILDING,
    CANDIDATE,
    LIVE,
    GenerationRegistry,
    generation_complete,
)
from batch_pipeline.inference import EmbeddingRunner
from batch_pipeline.landing import LandingContext, LandSummary, land_documents
from batch_pipeline.models import ResolvedModel, load_tokenizer, resolve_model
from batch_pipeline.planning import PlanSettings, PlanSummary, plan_stale_chunks
from batch_pipeline.prepare import PrepareSummary, prepare_chunks
from batch_pipeline.reconcile import reconcile_index
from batch_pipeline.sources import DocumentSource, PartitionFilter, S3ClientFactory, make_source
from batch_pipeline.staging import StagePath, is_full_pass
from batch_pipeline.storage import StorageLocations
from batch_pipeline.tracking import TrackingStore
from batch_pipeline.vector_store import VectorStore

STAGES = ("collected", "chunks", "plan", "embeddings")


class NoLiveGenerationError(RuntimeError):
    """A reader asked for a collection that has never been promoted."""


@dataclass(frozen=True)
class StageOutput:
    path: StagePath
    summary: object


class CollectionPipeline:
    """The engine for one collection (one partition)."""

    def __init__(
        self,
        config: PipelineConfig,
        storage: StorageLocations,
        collection: str,
        tracking: TrackingStore | None = None,
        store: VectorStore | None = None,
        s3_client: S3ClientFactory | None = None,
    ) -> None:
        try:
            self.collection: CollectionConfig
            self.collection, self.shard = config.locate(collection)
        except KeyError as error:
            raise ConfigError(str(error.args[0])) from None
        # the partition key: the collection, or one shard of it ("<name>-s03")
        self.partition = collection
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
        """Whether a document belongs to this partition (always, unless sharded)."""
        return self.shard is None or shard_of(doc_id, self.collection.shards) == self.shard

    def covered_partitions(self) -> list[str]:
        return self.collection.partition_keys() if self.shard is None else [self.partition]

    @cached_property
    def model(self) -> ResolvedModel:
        return resolve_model(self.config.model)

    @cached_property
    def fingerprint(self) -> str:
        return model_fingerprint(self.model, self.collection.chunking)

    @cached_property
    def index(self) -> str:
        """This configuration's generation: its LanceDB table and its key in the tracking store.

        A change of model fingerprint starts a new generation beside the live one.
        """
        return generation_index(self.name, self.fingerprint)

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

    def path(self, run_id: str, stage: str) -> StagePath:
        return self.staging.stage_file(self.partition, run_id, stage)

    # ------------------------------------------------------------------- stages

    def collect(self, run_id: str, doc_ids: list[str] | None = None) -> StageOutput:
        out = self.path(run_id, "collected")
        drifted: list[str] = []
        orphans: list[str] = []
        if doc_ids is None:  # a full run also repairs any drift between index and tracking
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
        )
        self.tracking.record_failures(self.index, summary.failures, run_id)
        return StageOutput(out, summary)

    def prepare(self, run_id: str, collected: StagePath) -> StageOutput:
        out = self.path(run_id, "chunks")
        summary: PrepareSummary = prepare_chunks(
            collected,
            out,
            lambda: load_tokenizer(self.model.path),
            self.chunk_settings(),
            self.fingerprint,
            lambda ids: self.store.chunk_keys(self.index, ids),
        )
        self.tracking.record_failures(self.index, summary.failures, run_id)
        return StageOutput(out, summary)

    def plan(
        self, run_id: str, chunks: StagePath, settings: PlanSettings, dtype_bytes: int = 4
    ) -> StageOutput:
        out = self.path(run_id, "plan")
        summary: PlanSummary = plan_stale_chunks(chunks, out, settings, self.model, dtype_bytes)
        return StageOutput(out, summary)

    def checkpoint_dir(self) -> StagePath:
        """Execute checkpoints, shared by the runs of one model fingerprint until landed."""
        return self.staging.checkpoint_dir(self.partition, self.fingerprint)

    def execute(
        self,
        run_id: str,
        plan: StagePath,
        get_runner: Callable[[], EmbeddingRunner],
        checkpoint_every: int = 8,
    ) -> StageOutput:
        """Run the plan; the model is only loaded (by `get_runner`) if there is work."""
        out = self.path(run_id, "embeddings")
        summary: ExecuteSummary = execute_plan(
            plan,
            out,
            get_runner,
            self.model.embedding_dimension,
            self.checkpoint_dir(),
            checkpoint_every,
        )
        return StageOutput(out, summary)

    def land(
        self,
        run_id: str,
        collected: StagePath,
        chunks: StagePath,
        embeddings: StagePath,
        dimension: int,
        partition: str | None = None,
    ) -> LandSummary:
        ctx = LandingContext(
            collection=self.name,
            index=self.index,
            partition=partition or self.partition,
            run_id=run_id,
            model_name=self.model.name,
            fingerprint=self.fingerprint,
            dimension=dimension,
        )
        table = self.store.open(self.index)
        version_before = table.version if table is not None else 0
        upkeep = self.config.maintenance
        with self.tracking.collection_lock(self.index, owner=run_id):
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
            # under the lock: concurrent shard runs update the same generation record
            self._track_generation(full_pass=is_full_pass(collected))
        self.tracking.record_run(
            run_id=run_id,
            collection=self.index,
            model_name=self.model.name,
            fingerprint=self.fingerprint,
            docs_landed=summary.documents_landed,
            docs_deleted=summary.documents_deleted,
            docs_failed=len(summary.failures),
            chunks_embedded=summary.chunks_embedded,
            chunks_reused=summary.chunks_reused,
            chunks_removed=summary.chunks_removed,
            table_version=summary.table_version,
            table_version_before=version_before,
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

    @cached_property
    def generations(self) -> GenerationRegistry:
        return GenerationRegistry(self.tracking)

    def generation(self) -> dict:
        """This configuration's generation record (registered on first use)."""
        self.generations.ensure(
            self.name, self.fingerprint, self.index, self.config.model.model_dump(mode="json")
        )
        return self.generations.get(self.name, self.fingerprint)

    def _track_generation(self, full_pass: bool) -> None:
        record = self.generation()
        stats = self.store.stats(self.index)
        passes = set(json.loads(record["full_passes"] or "[]"))
        if full_pass:
            passes |= set(self.covered_partitions())
        full = passes >= set(self.collection.partition_keys())  # every shard had a full pass
        complete = generation_complete(full, self.tracking.freshness(self.index)["pending"])
        state = record["state"]
        if state == BUILDING and complete:
            state = CANDIDATE
        self.generations.update(
            self.name,
            self.fingerprint,
            full_pass=full,
            full_passes=json.dumps(sorted(passes)),
            complete=complete,
            state=state,
            rows=stats.rows if stats else 0,
            documents=self.tracking.document_count(self.index),
        )
        if state == CANDIDATE and self.generations.live(self.name) is None:
            self.generations.promote(
                self.name, self.fingerprint, "first complete generation", actor="pipeline"
            )

    def live_index(self) -> tuple[str, ModelConfig]:
        """The live generation's table and model (what every reader uses)."""
        live = self.generations.live(self.name)
        if live is None:
            raise NoLiveGenerationError(
                f"collection {self.name!r} has no live generation yet; "
                "materialise it first (make demo)"
            )
        return live["index_name"], ModelConfig.model_validate(json.loads(live["model_config"]))

    def review_generation(
        self, runner_for: Callable[[ResolvedModel], EmbeddingRunner]
    ) -> dict[str, object]:
        """Score this generation (and live) on the evaluation set; promote it if the gate allows.

        Returns the decision and scores, also recorded on the generation.
        """
        record = self.generation()
        live = self.generations.live(self.name)
        result: dict[str, object] = {
            "generation": self.index,
            "state": record["state"],
            "complete": bool(record["complete"]),
            "live_generation": live["index_name"] if live else None,
        }
        evaluation = self.collection.evaluation
        scores: dict[str, dict] = {}
        if evaluation is not None:
            queries = load_eval_set(evaluation.path)
            scores["candidate"] = score_generation(
                self.store,
                self.index,
                runner_for(self.model),
                queries,
                evaluation.k,
                self.model.query_prefix,
            )
            if live is not None and live["fingerprint"] != self.fingerprint:
                live_model = resolve_model(
                    ModelConfig.model_validate(json.loads(live["model_config"]))
                )
                scores["live"] = score_generation(
                    self.store,
                    live["index_name"],
                    runner_for(live_model),
                    queries,
                    evaluation.k,
                    live_model.query_prefix,
                )
        result["scores"] = scores
        if record["state"] == LIVE:
            result["decision"] = "live"
            result["reason"] = "this generation is live"
        else:
            allowed, reason = gate(
                bool(record["complete"]),
                scores.get("candidate"),
                scores.get("live"),
                evaluation.tolerance if evaluation else 0.0,
            )
            if allowed:
                self.generations.promote(self.name, self.fingerprint, reason, actor="pipeline")
            result["decision"] = "promoted" if allowed else "refused"
            result["reason"] = reason
        self.generations.update(
            self.name,
            self.fingerprint,
            scores=json.dumps(scores),
            decision=f"{result['decision']}: {result['reason']}",
        )
        return result

    def maintain(self, retention: timedelta, owner: str) -> dict[str, int]:
        """Compact the table and clean up versions older than `retention` (nightly)."""
        with self.tracking.collection_lock(self.index, owner=owner):
            return self.store.maintain(self.index, retention)

    def run(
        self,
        run_id: str,
        runner: EmbeddingRunner | Callable[[], EmbeddingRunner],
        plan_settings: PlanSettings | None = None,
        doc_ids: list[str] | None = None,
        checkpoint_every: int = 8,
    ) -> dict[str, object]:
        """All five stages in order (what a Dagster run of one partition does); summaries.

        `runner` may be a loaded model or a function that loads one only if there is work.
        """
        get_runner = runner if callable(runner) else (lambda: runner)
        collected = self.collect(run_id, doc_ids)
        chunks = self.prepare(run_id, collected.path)
        plan = self.plan(run_id, chunks.path, plan_settings or PlanSettings())
        embeddings = self.execute(run_id, plan.path, get_runner, checkpoint_every)
        landed = self.land(
            run_id, collected.path, chunks.path, embeddings.path, self.model.embedding_dimension
        )
        return {
            "collect": collected.summary,
            "prepare": chunks.summary,
            "plan": plan.summary,
            "execute": embeddings.summary,
            "land": landed,
        }
