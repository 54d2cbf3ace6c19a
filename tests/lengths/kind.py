"""The lengths product, declared: one product (`<collection>_lengths`) per collection that
`products: lengths: collections` names, on the collection's own partitions."""

from typing import ClassVar

from batch_pipeline.config import PipelineConfig
from batch_pipeline.declaration import Lines, ProductEnv, ProductFace, ProductKind, ProductTarget
from tests.lengths import report
from tests.lengths.config import LengthsConfig
from tests.lengths.executor import LengthExecutor
from tests.lengths.partition import LENGTH_STAGES, LengthPartition
from tests.lengths.product import NAME, SUFFIX, BucketScorer, CoversPassRule, LengthProduct


class DocumentLengths(ProductFace):
    report_kind: ClassVar[str] = report.REPORT_KIND
    status_lines: ClassVar[Lines] = staticmethod(report.status_lines)
    health_line = staticmethod(report.health_line)
    product: LengthProduct

    def run_groups(self) -> list[list[str]]:
        return [[self.product.collection_name]]

    def status(self) -> dict[str, object]:
        return report.product_status(self.product)

    def health(self) -> dict[str, object]:
        return report.product_health(self.product)


def targets(config: PipelineConfig) -> list[ProductTarget]:
    if NAME not in config.products:
        return []
    return [
        ProductTarget(f"{name}{SUFFIX}", NAME, name)
        for name in config.product_section(NAME).collections
    ]


def open_lengths(env: ProductEnv, target: ProductTarget) -> DocumentLengths:
    return DocumentLengths(LengthProduct(env, target.collection))


LENGTHS = ProductKind(
    name=NAME,
    package="tests.lengths",
    family=None,
    section=LengthsConfig,
    targets=targets,
    open=open_lengths,
    partition=LengthPartition,
    executor=LengthExecutor,
    rule=CoversPassRule,
    scorer=BucketScorer,
    report="tests.lengths.report",
    stages=LENGTH_STAGES,  # its assets, built from them (it names no Dagster definitions)
    collection_runs=True,  # the publish sensors and the nightly reconciliation run it
)
