"""The ticket intents, declared: one product (`tickets.name`) when `tickets:` is configured,
run a day at a time by `DayPartition` on the embedding executor, complete when it holds every
day live holds, scored by accuracy on the labelled tickets."""

from typing import ClassVar

from batch_pipeline.config import PipelineConfig, TicketsConfig
from batch_pipeline.declaration import (
    Lines,
    ProductEnv,
    ProductFace,
    ProductKind,
    ProductTarget,
    RunReport,
)
from batch_pipeline.tickets import report
from batch_pipeline.tickets.partition import DayPartition
from batch_pipeline.tickets.product import TicketProduct
from batch_pipeline.tickets.review import AccuracyScorer, HoldsLiveDaysRule

NAME = "tickets"


class TicketIntents(ProductFace):
    """The ticket intents, as a product."""

    report_kind: ClassVar[str] = report.REPORT_KIND
    status_lines: ClassVar[Lines] = staticmethod(report.status_lines)
    health_line = staticmethod(report.health_line)
    product: TicketProduct

    def run_json(self, run: RunReport) -> dict[str, object]:
        return report.run_json(run)

    def run_lines(self, run: RunReport) -> list[str]:
        return report.run_lines(run)

    def run_groups(self) -> list[list[str]]:
        """Every due day, in one group: a day runs once a night, as a rule."""
        return [self.product.partition_days()]

    def partition(self, key: str) -> DayPartition:
        """One day (YYYY-MM-DD)."""
        return self.product.day(key)

    def status(self) -> dict[str, object]:
        return report.product_status(self.product)

    def health(self) -> dict[str, object]:
        return report.product_health(self.product)


def targets(config: PipelineConfig) -> list[ProductTarget]:
    """The ticket intents, where configured; they run by day, over no collection."""
    return [] if config.tickets is None else [ProductTarget(config.tickets.name, NAME, None)]


def open_tickets(env: ProductEnv, target: ProductTarget) -> TicketIntents:
    """The ticket intents; an S3 export is read through `env.s3_client` where one is given,
    and the cascade's chat model is `env.generator` where one is given."""
    return TicketIntents(
        TicketProduct(
            env.config,
            env.storage,
            env.tracking,
            env.store,
            env.s3_client,
            env.execution,
            env.generator,
        )
    )


TICKETS = ProductKind(
    name=NAME,
    package="batch_pipeline.tickets",
    family="embed",
    section=TicketsConfig,
    targets=targets,
    open=open_tickets,
    partition=DayPartition,
    rule=HoldsLiveDaysRule,
    scorer=AccuracyScorer,
    report="batch_pipeline.tickets.report",
    definitions="batch_pipeline.definitions.ticket_intents:ticket_definitions",
    configured_at="tickets",
    commands="batch_pipeline.cli.tickets",
    generation_note=report.generation_note,
)
