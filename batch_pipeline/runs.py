"""The run frame every product's partition runs in: five stages under the partition's lease,
and a landing that records the run.

- `StagedPartition` is one partition of a product as the frame runs it. Its `run` takes the
  partition's run lease (a second run of the partition waits, then finds only what is still
  stale) and runs collect -> prepare -> plan -> execute -> land. Plan and execute are the
  frame's own, through the partition's `executor` (embedding or generation, see
  `batch_pipeline.executors`); a product writes collect, prepare and land.
- `landing` is the land stage's frame, and only the frame opens it (`StagedPartition.land_stage`
  calls the product's `land` inside it). On entry it takes the generation's landing lease,
  reads the table's version and records the run's start (so a run that dies after a commit is
  known). The product's land does its own work inside, asks the run's mass-deletion guard
  before it deletes (`LandedRun.hold_deletions`), and reports a `RunOutcome`, whose `deleted`
  the frame holds against what the guard cleared. On exit it gathers every stage's seconds,
  builds the run's measures, writes its typed `RunRecord`, drops the checkpoints the run has
  landed and prunes old stage files. The land hands on a `Landing`: the product's summary and
  the frame's record of the run (its measures and what the guard held back), which the assets
  and the commands read.

A product brings its stages and its counts; nothing here knows documents from tickets.
"""

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from batch_pipeline.config import PipelineConfig
from batch_pipeline.executors import ExecuteOptions, Executor
from batch_pipeline.executors.batch_api import BatchLedger, with_ledger
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.generator import Generator
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.measures.run import MANUAL, ROLLING_RUNS, RunMeasures, rolling_measures
from batch_pipeline.stages import COLLECT, EXECUTE, LAND, PLAN, PREPARE, Stage
from batch_pipeline.stages.checkpointed import PLAN_SECONDS
from batch_pipeline.stages.execute import execute_record
from batch_pipeline.state.checkpoints import checkpoints_used
from batch_pipeline.state.staging import (
    STAGE_SECONDS,
    StagePath,
    StagingArea,
    collected_at,
    stage_summary,
)
from batch_pipeline.state.tracking import RunRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore


@dataclass(frozen=True)
class StageOutput:
    """What a stage handed on: its file, and its summary."""

    path: StagePath
    summary: object


Engine = Embedder | Generator  # what an executor runs: an embedding model, or a chat model


def no_engine() -> Engine:
    """The loader of a request that must not load a model (a land replayed by hand)."""
    raise RuntimeError("this run was given no engine to load")


@dataclass(frozen=True)
class RunRequest:
    """What a run of one partition was asked to do; every stage reads what concerns it."""

    run_id: str
    load: Callable[[], Engine] = no_engine  # loads the executor's engine, only if there is work
    options: ExecuteOptions = field(default_factory=ExecuteOptions)
    doc_ids: list[str] | None = None  # a targeted run (products that support it)
    trigger: str = MANUAL
    progress: ProgressSink | None = None
    progress_interval: float = 15.0
    allow_mass_delete: bool = False
    started_at: float | None = None  # set by `StagedPartition.run`: when the run began
    retries: int = 0  # steps of the run retried so far (Dagster's step and run retries)


def as_loader(engine: Engine | Callable[[], Engine]) -> Callable[[], Engine]:
    """A loaded engine, or a function that loads one, as a function."""
    return engine if callable(engine) else (lambda: engine)


@dataclass(frozen=True)
class DeletionGuard:
    """The mass-deletion limits (`limits.max_delete_fraction`, `limits.max_delete_documents`)
    against a partition's landed documents, unless the run's operator confirmed them.

    An empty listing (an unmounted volume, a mistyped prefix, credentials that list nothing, a
    query that suddenly returns no rows) looks exactly like every document being deleted; this
    is what stops such a run from emptying a production index."""

    max_fraction: float
    max_documents: int | None
    # the partition's documents before this run; asked only when something is to be deleted
    landed_documents: Callable[[], int]
    confirmed: bool = False  # --allow-mass-delete, or allow_mass_delete in the run config
    unit: str = "documents"  # what is deleted, and of what: "documents of handbook"

    def refusal(self, deleting: int, adding: int = 0) -> str | None:
        """Why deleting `deleting` documents (while `adding` new ones) needs confirmation, or
        None if it does not. The share is weighed against the larger of what the partition
        holds now and what it will hold: a run that adds a thousand documents and removes the
        one old one is no mass deletion; an empty listing still is."""
        if self.confirmed or deleting == 0:
            return None
        landed = max(self.landed_documents(), deleting)
        base = max(landed, landed - deleting + adding)
        share = deleting / base
        if self.max_documents is not None and deleting > self.max_documents:
            limit = f"limits.max_delete_documents ({self.max_documents})"
        elif share > self.max_fraction:
            limit = f"limits.max_delete_fraction ({self.max_fraction:g})"
        else:
            return None
        weighed = f" of the {base} it will hold" if base > landed else ""
        return (
            f"the run would delete {deleting} of {landed} landed {self.unit} "
            f"({share:.0%}{weighed}), more than {limit}"
        )


@dataclass(frozen=True)
class RunScope:
    """Where one partition's runs land, and what they are recorded under."""

    config: PipelineConfig
    tracking: TrackingStore
    store: VectorStore
    staging: StagingArea
    index: str  # the generation's table and tracking key
    partition: str  # the Dagster partition key the measures record
    staging_key: str  # the partition's folder in staging
    model_name: str
    fingerprint: str  # the generation's
    checkpoints: StagePath  # execute's checkpoint folder of this partition and model
    unit: str  # what the product's inputs are (documents, tickets, ...)
    # what the partition holds now, in `unit`: what the mass-deletion guard weighs against
    landed_inputs: Callable[[], int]


@dataclass(frozen=True)
class RunOutcome:
    """What a product's land reports to the frame: its own counts, by name, and the figures
    the run's measures need, in the product's unit."""

    counts: dict[str, int]
    attempted: int  # inputs the run tried to land or remove
    failed: int  # of those, failed in any stage
    deleted: int  # inputs the land removed: never more than the guard cleared
    partition_inputs: int  # model inputs a full rebuild of the partition would compute
    table_version: int | None
    quarantined: int = 0
    completeness: float | None = None


@dataclass
class LandedRun:
    """A run inside `landing`: the table's version before it, its mass-deletion guard and
    what that held back, what its land reported, and (after the frame's exit) its measures."""

    version_before: int
    guard: DeletionGuard
    outcome: RunOutcome | None = None
    measures: RunMeasures | None = None
    deletions_held: int = 0
    deletions_held_reason: str | None = None
    cleared: int = 0  # deletions the guard let through: the most the land may remove

    def hold_deletions(self, deleting: int, adding: int = 0) -> str | None:
        """Why the land must not delete `deleting` inputs (while adding `adding` new ones),
        recorded on the run, or None when it may. Every product's land asks before it
        deletes; what is held stays, and the run's record and checks say so. A land that
        removes more than it was cleared for fails in the frame (`RunOutcome.deleted`)."""
        held = self.guard.refusal(deleting, adding)
        if held is not None:
            self.deletions_held, self.deletions_held_reason = deleting, held
        else:
            self.cleared += deleting
        return held


class UnguardedDeletionError(RuntimeError):
    """A product's land removed inputs the mass-deletion guard did not clear: a bug in the
    product, never an operator's doing."""


@dataclass(frozen=True)
class Landing:
    """What a land hands on: the product's own summary (its nouns) and the frame's record of
    the run (its measures, what the mass-deletion guard held back)."""

    summary: object  # the product's land summary, with `metadata()`
    run: LandedRun

    @property
    def measures(self) -> RunMeasures:
        return self.run.measures

    @property
    def deletions_held(self) -> int:
        return self.run.deletions_held

    @property
    def deletions_held_reason(self) -> str | None:
        return self.run.deletions_held_reason

    def metadata(self) -> dict[str, object]:
        """The product's land metadata, and what the frame held back."""
        return {
            **self.summary.metadata(),
            "deletions_held": self.deletions_held,
            "deletions_held_reason": self.deletions_held_reason,
        }


@dataclass(frozen=True)
class StageFiles:
    """The stage files a land reads: collect's, prepare's and execute's."""

    collected: StagePath
    prepared: StagePath
    executed: StagePath


@contextmanager
def landing(scope: RunScope, request: RunRequest, files: StageFiles) -> Iterator[LandedRun]:
    """The land stage's frame (see the module docstring), for the run `request` asked for:
    its `started_at` is when the run began (default: when its collect started), `retries`
    how many of its steps were retried, `allow_mass_delete` confirms deletions beyond the
    mass-deletion limits."""
    run_id, started_at = request.run_id, request.started_at
    land_started = time.perf_counter()
    limits = scope.config.limits
    guard = DeletionGuard(
        limits.max_delete_fraction,
        limits.max_delete_documents,
        scope.landed_inputs,
        confirmed=request.allow_mass_delete,
        unit=f"{scope.unit} of {scope.partition}",  # "landed tickets of 2026-11-29"
    )
    with scope.tracking.landing_lease(scope.index, owner=run_id):
        table = scope.store.open(scope.index)  # under the lease: no commit can come between
        run = LandedRun(table.version if table is not None else 0, guard)
        scope.tracking.record_run_started(
            run_id,
            scope.index,
            model_name=scope.model_name,
            fingerprint=scope.fingerprint,
            table_version_before=run.version_before,
        )
        yield run
    outcome = run.outcome
    if outcome is None:
        raise RuntimeError(f"the land of run {run_id} reported no outcome")
    if outcome.deleted > run.cleared:
        raise UnguardedDeletionError(
            f"the land of run {run_id} removed {outcome.deleted} {scope.unit} of "
            f"{scope.partition} but the mass-deletion guard cleared {run.cleared}: every "
            "land asks `LandedRun.hold_deletions` before it deletes"
        )
    executed = execute_record(files.executed)
    # a run that collected another's provider batches is that run's second half: one record,
    # from when the submitting run started
    submitted_by = executed.get("submitted_by")
    if submitted_by:
        started_at = (
            scope.tracking.run_started(submitted_by, scope.index)
            or executed.get("submitted_at")
            or started_at
        )
    seconds = {
        COLLECT.name: stage_summary(files.collected).get(STAGE_SECONDS),
        PREPARE.name: stage_summary(files.prepared).get(STAGE_SECONDS),
        PLAN.name: executed.get(PLAN_SECONDS),
        EXECUTE.name: executed.get(STAGE_SECONDS),
        LAND.name: time.perf_counter() - land_started,
    }
    run.measures = RunMeasures.from_execute(
        executed,
        scope.config,
        request.trigger,
        partition=scope.partition,
        started_at=started_at or collected_at(files.collected),
        finished_at=time.time(),
        unit=scope.unit,
        attempted=outcome.attempted,
        failed=outcome.failed,
        retries=request.retries,
        quarantined=outcome.quarantined,
        completeness=outcome.completeness,
        partition_inputs=outcome.partition_inputs,
        stage_seconds={k: round(float(s), 3) for k, s in seconds.items() if s is not None},
    )
    scope.tracking.record_run(
        RunRecord(
            run_id=run_id,
            index=scope.index,
            model_name=scope.model_name,
            fingerprint=scope.fingerprint,
            measures=run.measures,
            counts=outcome.counts,
            table_version=outcome.table_version,
            table_version_before=run.version_before,
            deletions_held=run.deletions_held,
        )
    )
    if submitted_by:
        scope.tracking.merge_submitting_run(submitted_by, scope.index)
    if not executed.get("inputs_unanswered"):  # else kept: answers whose documents wait
        remove_landed_checkpoints(scope.checkpoints, files.executed)
    upkeep = scope.config.maintenance
    scope.staging.prune_runs(
        scope.staging_key,
        {run_id, "checkpoints"},
        upkeep.staging_runs_kept,
        finished=lambda run: scope.tracking.run_finished(scope.index, run),
        unfinished_grace_seconds=upkeep.unlanded_run_retention_hours * 3600,
    )


def remove_landed_checkpoints(checkpoints: StagePath, executed: StagePath) -> None:
    """Drop the checkpoints this run wrote or resumed from: their vectors are landed.

    Folders of runs still executing on this partition are left to them. (A run a provider
    has not answered every input of keeps its checkpoints: they hold the answers for the
    documents that wait for the rest, and the run that lands those removes them.)
    """
    used = checkpoints_used(executed)
    if used is None:  # an output written before execute recorded its folders
        checkpoints.delete()
        return
    for name in used:
        (checkpoints / name).delete()


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
