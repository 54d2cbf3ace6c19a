"""One partition of the tickets product, as the run frame runs it (`DayPartition`): its stages, its
land inside the frame, and where its runs are recorded."""

from collections import Counter
from collections.abc import Iterator
from datetime import date, timedelta
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.compute as pc

from batch_pipeline.config import ConfigError
from batch_pipeline.executors.embedding import EmbeddingExecutor, embedding_executor
from batch_pipeline.inference.models import load_tokenizer
from batch_pipeline.measures.run import TICKETS
from batch_pipeline.runs.landing import LandedRun, RunOutcome, StageFiles
from batch_pipeline.runs.partition import ProductPartition
from batch_pipeline.runs.request import RunRequest, StageOutput
from batch_pipeline.stages import Stage
from batch_pipeline.state.staging import StagePath, read_table
from batch_pipeline.tickets import (
    TICKET_COLLECT,
    TICKET_PREPARE,
    TICKET_STAGES,
)
from batch_pipeline.tickets.collect import OK, collect_tickets, collected_failures
from batch_pipeline.tickets.intent_store import day_filter
from batch_pipeline.tickets.land import DayTarget, TicketLandSummary, land_day
from batch_pipeline.tickets.mix import TRAILING_DAYS
from batch_pipeline.tickets.prepare import prepare_inputs

if TYPE_CHECKING:
    from batch_pipeline.tickets.product import TicketProduct


class DayPartition(ProductPartition):
    """The engine for one day of tickets (one daily partition)."""

    unit = TICKETS

    def __init__(self, product: "TicketProduct", day: date) -> None:
        super().__init__(product, day.isoformat())
        self.day = day
        self.staging = product.staging

    @property
    def stages(self) -> tuple[Stage, ...]:
        return TICKET_STAGES

    @property
    def executor(self) -> EmbeddingExecutor:
        return embedding_executor(self.model, self.product.execution)

    def _same_model_rows(self, columns: list[str]) -> Iterator:
        """These columns of the day's rows in every generation of this model."""
        for index in self.product.same_model_generations():
            rows = self.product.intents.day_rows(index, self.day, columns)
            if rows.num_rows:
                yield rows

    def known_inputs(self) -> set[str]:
        """The day's input hashes this model already holds a vector for (no vectors read)."""
        return {
            h
            for rows in self._same_model_rows(["input_hash"])
            for h in rows["input_hash"].to_pylist()
        }

    def known_vectors(self) -> dict[str, np.ndarray]:
        """Vectors this model already computed for the day's inputs, by input hash."""
        found: dict[str, np.ndarray] = {}
        for rows in self._same_model_rows(["input_hash", "vector"]):
            vectors = pc.list_flatten(rows["vector"]).to_numpy().reshape(rows.num_rows, -1)
            found.update(zip(rows["input_hash"].to_pylist(), vectors, strict=True))
        return found

    # ------------------------------------------------------------------- stages

    def collect(self, run_id: str) -> StageOutput:
        self.product.export.check()
        out = self.path(run_id, TICKET_COLLECT.file)
        return StageOutput(out, collect_tickets(self.product.export, self.day, out))

    def prepare(self, run_id: str, collected: StagePath) -> StageOutput:
        out = self.path(run_id, TICKET_PREPARE.file)
        model = (
            self.product.classifier.base_model
        )  # its tokenizer and prefix are the fine-tuned one's too
        summary = prepare_inputs(
            collected,
            out,
            lambda: load_tokenizer(model.path),
            self.product.settings.max_tokens,
            self.known_inputs,
            model.document_prefix,
        )
        return StageOutput(out, summary)

    def measured_partitions(self) -> list[str]:
        """Every due day: the days are alike, so the rolling figures are the product's."""
        return self.product.partition_days()

    def landed_inputs(self) -> int:
        """The day's landed tickets: what its deletions are weighed against."""
        return self.product.store.count_rows(self.product.index, day_filter(self.day))

    def checkpoint_dir(self) -> StagePath:
        """Execute checkpoints of the day, shared by the runs of one model until landed."""
        return self.product.staging.checkpoint_dir(
            self.staging_key, self.product.classifier.model_fingerprint
        )

    def trailing_counts(self, index: str | None = None) -> list[dict[str, int]]:
        """The intent counts of the trailing days a generation (default: this
        configuration's) holds."""
        counts = []
        for back in range(1, TRAILING_DAYS + 1):
            day = self.day - timedelta(days=back)
            rows = self.product.intents.day_rows(index or self.product.index, day, ["intent"])
            if rows.num_rows:
                counts.append(dict(Counter(rows["intent"].to_pylist())))
        return counts

    def land(self, run: LandedRun, request: RunRequest, files: StageFiles) -> TicketLandSummary:
        """Classify and write the day, and record its failures, inside the frame's landing
        (`StagedPartition.land_stage`); tickets gone from the export are removed only as far
        as its mass-deletion guard clears. The classifier loads the run's engine only if a
        ticket needs classifying."""
        product = self.product
        index = product.index
        record = product.record()
        target = DayTarget(
            index,
            self.partition,
            request.run_id,
            product.classifier.model_fingerprint,
            product.taxonomy.version,
            product.classifier.base_model.embedding_dimension,
        )
        collected_rows = read_table(
            files.collected, ["ticket_id", "day", "status", "error_reason", "error_message"]
        )
        summary = land_day(
            product.intents,
            target,
            files.prepared,
            files.executed,
            self.known_vectors,
            lambda: product.classifier.classifier_for(record, request.load),
            run.hold_deletions,
            product.cascades.day(record, request.run_id, self.partition),
        )
        summary.intents = product.taxonomy.names
        summary.failures = collected_failures(collected_rows) + summary.failures
        product.tracking.replace_failures(
            index, f"{self.partition}/", summary.failures, request.run_id
        )
        rows = product.store.count_rows(index)
        product.registry.update(product.name, product.fingerprint, rows=rows, documents=rows)
        run.outcome = self._outcome(collected_rows.num_rows, summary, collected_rows)
        summary.mix = summary.mix.with_shift(self.trailing_counts())
        return summary

    @staticmethod
    def _outcome(read: int, landed: TicketLandSummary, collected_rows) -> RunOutcome:  # noqa: ANN001
        """What the land counted, in tickets, for the run's record."""
        valid = sum(1 for s in collected_rows["status"].to_pylist() if s == OK)
        return RunOutcome(
            counts={
                "tickets_read": read,
                "tickets_valid": valid,
                "tickets_classified": landed.tickets_classified,
                "tickets_unchanged": landed.tickets_unchanged,
                "tickets_removed": landed.tickets_removed,
                "tickets_failed": len(landed.failures),
            },
            attempted=read,
            failed=len(landed.failures),
            deleted=landed.tickets_removed,
            completeness=landed.mix.total / valid if valid else 1.0,
            partition_inputs=valid,
            table_version=landed.table_version,
        )

    # -------------------------------------------------------------------- a run

    def collect_stage(self, request: RunRequest) -> StageOutput:
        if request.doc_ids is not None:
            raise ConfigError("a ticket day runs whole: --doc-id is for collections")
        return self.collect(request.run_id)

    def prepare_stage(self, request: RunRequest, collected: StagePath) -> StageOutput:
        return self.prepare(request.run_id, collected)
