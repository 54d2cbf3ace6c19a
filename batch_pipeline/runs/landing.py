"""The land stage's frame (`landing`): the generation's landing lease, the run's record and
measures, and the mass-deletion guard every product's land asks before it deletes (see the
package's docstring)."""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from batch_pipeline.config import PipelineConfig
from batch_pipeline.measures.run import RunMeasures
from batch_pipeline.runs.request import RunRequest
from batch_pipeline.stages import COLLECT, EXECUTE, LAND, PLAN, PREPARE
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
