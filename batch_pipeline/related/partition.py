"""One partition of the related documents as the run frame runs it: collect is the
collection's own, prepare finds the stale lists and their candidates in the live index, the
executor scores them, land writes the lists inside `runs.landing` and asks its mass-deletion
guard before deleting. Related documents run on the whole collection (a list's candidates
are any of its documents)."""

from typing import TYPE_CHECKING

from batch_pipeline.declaration import CollectionPartition
from batch_pipeline.related import RELATED_STAGES
from batch_pipeline.related.land import RelatedLandSummary, RelatedLineage, land_related
from batch_pipeline.related.prepare import prepare_related
from batch_pipeline.runs.landing import LandedRun, RunOutcome, StageFiles
from batch_pipeline.runs.request import RunRequest, StageOutput
from batch_pipeline.stages import Stage
from batch_pipeline.state.staging import StagePath, stage_summary

if TYPE_CHECKING:
    from batch_pipeline.related.product import RelatedProduct


class RelatedPartition(CollectionPartition):
    """The related documents of one collection, as the frame runs them."""

    product: "RelatedProduct"

    @property
    def stages(self) -> tuple[Stage, ...]:
        return RELATED_STAGES

    @property
    def executor(self):  # noqa: ANN201 - the score family's executor, or CandidateScores
        return self.product.executor

    def landed_inputs(self) -> int:
        """The documents with a list: what deletions are weighed against."""
        if not self.store.has_table(self.index):
            return 0
        return len(self.product.landed_lists(self.index))

    def prepare_stage(self, request: RunRequest, collected: StagePath) -> StageOutput:
        product = self.product
        out = self.path(request.run_id, self.stages[1].file)
        landed = product.landed_lists(self.index) if self.store.has_table(self.index) else {}
        reader = product.live_index_reader()
        summary = prepare_related(
            reader, landed, out, product.settings.candidates, self.fingerprint
        )
        return StageOutput(out, summary)

    def land(self, run: LandedRun, request: RunRequest, files: StageFiles) -> RelatedLandSummary:
        product, run_id = self.product, request.run_id
        product.record()
        facts = stage_summary(files.prepared)
        deleted = list(facts["deleted"])
        if run.hold_deletions(len(deleted), len(facts["stale"])) is not None:
            deleted = []
        model = product.model
        lineage = RelatedLineage(
            product.collection_name, self.partition, model.name, model.fingerprint, run_id
        )
        summary = land_related(
            files.prepared,
            files.executed,
            self.store,
            self.index,
            product.settings.k,
            facts["stale"],
            deleted,
            lineage,
        )
        listed = self.landed_inputs()
        rows = self.store.count_rows(self.index) if self.store.has_table(self.index) else 0
        documents = int(facts["documents"])
        product.registry.update(
            product.name,
            self.fingerprint,
            rows=rows,
            documents=listed,
            full_pass=listed >= documents and not summary.awaiting,
        )
        run.outcome = RunOutcome(
            counts={
                "lists_scored": len(summary.landed),
                "lists_deleted": len(summary.deleted),
                "lists_awaiting_scores": len(summary.awaiting),
                "lists_in_table": listed,
            },
            attempted=len(summary.landed) + len(summary.deleted) + len(summary.awaiting),
            failed=0,
            deleted=len(summary.deleted),
            partition_inputs=documents,
            table_version=summary.table_version,
        )
        return summary
