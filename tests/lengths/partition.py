"""One partition of the lengths product as the run frame runs it: collect is the collection's
own, prepare marks the stale documents (`prepare`), the executor buckets them, land writes the
rows inside `runs.landing` and asks its mass-deletion guard before deleting (`land`). (For a
collection without shards: the generation counts one partition's documents.)"""

from typing import TYPE_CHECKING

from batch_pipeline.declaration import CollectionPartition
from batch_pipeline.runs.landing import LandedRun, StageFiles
from batch_pipeline.runs.request import RunRequest, StageOutput
from batch_pipeline.stages import COLLECT, Stage
from batch_pipeline.state.staging import StagePath
from batch_pipeline.state.vector_store import in_filter
from tests.lengths.executor import LengthExecutor
from tests.lengths.land import LengthLandSummary, land_lengths
from tests.lengths.prepare import prepare_lengths

if TYPE_CHECKING:
    from tests.lengths.product import LengthProduct

PYTHON = frozenset({"python", "parquet"})
LENGTH_STAGES: tuple[Stage, ...] = (
    COLLECT,  # the collection's own source_documents
    Stage("prepare", "length_inputs", "length_inputs", PYTHON, "mark the stale documents"),
    Stage("plan", "length_plan", "length_plan", PYTHON, "keep each stale input once"),
    Stage("execute", "length_buckets", "length_buckets", PYTHON, "bucket each input by size"),
    Stage("land", "document_lengths", None, frozenset({"lancedb"}), "write the buckets"),
)


class LengthPartition(CollectionPartition):
    product: "LengthProduct"

    @property
    def stages(self) -> tuple[Stage, ...]:
        return LENGTH_STAGES

    @property
    def executor(self) -> LengthExecutor:
        return LengthExecutor(self.product.settings.buckets)

    def _where(self) -> str:
        return in_filter("partition", [self.partition])  # escaped

    def landed_keys(self) -> dict[str, str]:
        if not self.store.has_table(self.index):
            return {}
        rows = self.store.scan(self.index, ["doc_id", "input_hash"], where=self._where())
        return dict(zip(rows["doc_id"].to_pylist(), rows["input_hash"].to_pylist(), strict=True))

    def landed_inputs(self) -> int:
        if not self.store.has_table(self.index):
            return 0
        return self.store.count_rows(self.index, self._where())

    def prepare_stage(self, request: RunRequest, collected: StagePath) -> StageOutput:
        return prepare_lengths(self, request, collected)

    def land(self, run: LandedRun, request: RunRequest, files: StageFiles) -> LengthLandSummary:
        return land_lengths(self, run, request, files)
