"""One partition of a product as the frame runs it (`StagedPartition`): collect, prepare,
plan, execute and land under the partition's lease, plan and execute through its executor;
and a partition of a product with one generation over all its partitions
(`ProductPartition`)."""

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol

from batch_pipeline.config import PipelineConfig
from batch_pipeline.executors import ExecuteOptions, Executor
from batch_pipeline.executors.batch_api import BatchLedger, with_ledger
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.measures.run import MANUAL, ROLLING_RUNS, RunMeasures, rolling_measures
from batch_pipeline.runs.landing import (
    LandedRun,
    Landing,
    RunScope,
    StageFiles,
    landing,
)
from batch_pipeline.runs.request import Engine, RunRequest, StageOutput, as_loader
from batch_pipeline.stages import Stage
from batch_pipeline.state.staging import (
    StagePath,
    StagingArea,
)
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore


class StagedPartition(ABC):
    """One partition of a product, as the frame runs it: the product writes `collect`,
    `prepare` and `land` (each reads what concerns it from the request) and says where it
    lands; plan, execute, the landing, the run and its scope are the frame's."""

    config: PipelineConfig
    tracking: TrackingStore
    store: VectorStore
    staging: StagingArea
    partition: str  # the Dagster partition key
    unit: str  # what the product's inputs are (documents, tickets, ...)

    @property
    @abstractmethod
    def stages(self) -> tuple[Stage, ...]:
        """The product's five stages (assets and stage files), in order."""

    @property
    @abstractmethod
    def staging_key(self) -> str:
        """The partition's folder in staging, and its run lease's key."""

    @property
    @abstractmethod
    def index(self) -> str:
        """The generation this configuration builds: its table and tracking key."""

    @property
    @abstractmethod
    def fingerprint(self) -> str:
        """The generation's fingerprint."""

    @property
    @abstractmethod
    def model(self) -> ResolvedModel | ChatModel:
        """The model execute runs."""

    @property
    @abstractmethod
    def executor(self) -> Executor:
        """What plans and runs the partition's model inputs (`batch_pipeline.executors`)."""

    @abstractmethod
    def checkpoint_dir(self) -> StagePath:
        """Execute's checkpoints, shared by the partition's runs of one model until landed."""

    @abstractmethod
    def landed_inputs(self) -> int:
        """What the partition holds now, in its `unit`: the mass-deletion guard weighs a
        run's deletions against it."""

    @abstractmethod
    def collect_stage(self, request: RunRequest) -> StageOutput: ...

    @abstractmethod
    def prepare_stage(self, request: RunRequest, collected: StagePath) -> StageOutput: ...

    @abstractmethod
    def land(self, run: LandedRun, request: RunRequest, files: StageFiles) -> object:
        """The product's land, inside the frame's `landing`: write its rows, ask
        `run.hold_deletions` before deleting anything, and set `run.outcome`. Returns the
        product's land summary (with `metadata()`)."""

    # ------------------------------------------------------------- the frame's

    def unread_excess(self, run_id: str, attempted: int) -> str | None:
        """Why a landed run read too little of its source to count as a success (`run` exits
        4), or None: products that read no source never say so."""
        return None

    def measured_partitions(self) -> list[str]:
        """The partitions whose runs this partition's rolling figures are taken over (by
        default its own; a product whose partitions are alike, its every one)."""
        return [self.partition]

    def recent_measures(self, limit: int = ROLLING_RUNS) -> list[RunMeasures]:
        """The measures of this generation's newest runs over `measured_partitions`, newest
        first."""
        rows = self.tracking.partition_runs(self.measured_partitions(), limit, self.index)
        return [m for row in rows if (m := RunMeasures.from_record(row)) is not None]

    def rolling_measures(self) -> dict[str, object]:
        """The generation's throughput and cost over its recent runs (`rolling_measures`)."""
        return rolling_measures(self.recent_measures())

    def path(self, run_id: str, stage_file: str) -> StagePath:
        """A stage file of one of the partition's runs."""
        return self.staging.stage_file(self.staging_key, run_id, stage_file)

    @property
    def run_scope(self) -> RunScope:
        """Where the partition's runs land and are recorded."""
        return RunScope(
            self.config,
            self.tracking,
            self.store,
            self.staging,
            self.index,
            self.partition,
            self.staging_key,
            self.model.name,
            self.fingerprint,
            self.checkpoint_dir(),
            self.unit,
            self.landed_inputs,
        )

    def land_stage(
        self, request: RunRequest, collected: StagePath, prepared: StagePath, executed: StagePath
    ) -> Landing:
        """Land the run: the product's `land` inside the frame's `landing`, which holds back
        mass deletions and records the run with its measures."""
        files = StageFiles(collected, prepared, executed)
        with landing(self.run_scope, request, files) as run:
            summary = self.land(run, request, files)
        return Landing(summary, run)

    def plan(
        self, run_id: str, prepared: StagePath, options: ExecuteOptions | None = None
    ) -> StageOutput:
        """Every stale input once, planned by the partition's executor."""
        out = self.path(run_id, self.stages[2].file)
        return StageOutput(out, self.executor.plan(prepared, out, options or ExecuteOptions()))

    def execute(
        self,
        run_id: str,
        planned: StagePath,
        load: Engine | Callable[[], Engine],
        options: ExecuteOptions | None = None,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> StageOutput:
        """Run the plan on the partition's executor; its engine is only loaded (by `load`)
        if there is work. `progress` hears how far it got every `progress_interval`
        seconds."""
        out = self.path(run_id, self.stages[3].file)
        # a Batch API executor records the batches it sends under the generation and partition
        ledger = BatchLedger(self.tracking, self.index, self.partition)
        summary = with_ledger(self.executor, ledger).execute(
            planned,
            out,
            as_loader(load),
            self.checkpoint_dir(),
            options or ExecuteOptions(),
            progress,
            progress_interval,
        )
        return StageOutput(out, summary)

    def run(
        self,
        run_id: str,
        load: Engine | Callable[[], Engine],
        options: ExecuteOptions | None = None,
        doc_ids: list[str] | None = None,
        on_wait: Callable[[str], None] | None = None,
        trigger: str = MANUAL,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
        allow_mass_delete: bool = False,
    ) -> dict[str, object]:
        """All five stages in order (what a Dagster run of one partition does), under the
        partition's run lease; their summaries by stage name. (Dagster runs of a partition
        are queued one at a time by the run coordinator.)

        `load` may be a loaded engine or a function that loads one only if there is work;
        `options` sets the plan and execute (token budget, checkpoints).
        A second run of the partition waits for the first (`on_wait` hears who holds it) and
        then finds only what is still stale. `trigger` is recorded with the run's measures;
        `progress` hears how prepare and execute get on; `doc_ids` asks for a targeted run
        and `allow_mass_delete` confirms deletions beyond the mass-deletion limits.
        """
        request = RunRequest(
            run_id,
            as_loader(load),
            options or ExecuteOptions(),
            doc_ids,
            trigger,
            progress,
            progress_interval,
            allow_mass_delete,
            started_at=time.time(),
        )
        self.executor  # noqa: B018 - settings no executor can run fail before any stage does
        lease_key = self.staging_key
        with self.tracking.partition_lease(lease_key, owner=run_id, on_wait=on_wait) as held:
            collected = self.collect_stage(request)
            prepared = self.prepare_stage(request, collected.path)
            planned = self.plan(run_id, prepared.path, request.options)
            executed = self.execute(
                run_id,
                planned.path,
                request.load,
                request.options,
                progress,
                progress_interval,
            )
            held.check()  # a run that lost its lease (a database blip) never lands beside another
            landed = self.land_stage(request, collected.path, prepared.path, executed.path)
        stages = (collected, prepared, planned, executed)
        summaries = {s.name: out.summary for s, out in zip(self.stages, stages, strict=False)}
        return {**summaries, self.stages[-1].name: landed}


class PartitionedProduct(Protocol):
    """A product with one generation over all its partitions (the ticket days, a
    collection's briefs)."""

    config: PipelineConfig
    tracking: TrackingStore
    store: VectorStore

    @property
    def name(self) -> str: ...

    @property
    def index(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def model(self) -> ResolvedModel | ChatModel: ...


class ProductPartition(StagedPartition):
    """A partition of a `PartitionedProduct`: its staging folder is under the product's
    name (apart from the collections' own), and its generation, fingerprint and model are
    the product's."""

    product: PartitionedProduct

    def __init__(self, product: PartitionedProduct, partition: str) -> None:
        """A partition (Dagster key `partition`) of `product`, on its configuration and
        stores."""
        self.product = product
        self.partition = partition
        self.config, self.tracking, self.store = product.config, product.tracking, product.store

    @property
    def staging_key(self) -> str:
        return f"{self.product.name}/{self.partition}"

    @property
    def index(self) -> str:
        return self.product.index

    @property
    def fingerprint(self) -> str:
        return self.product.fingerprint

    @property
    def model(self) -> ResolvedModel | ChatModel:
        return self.product.model
