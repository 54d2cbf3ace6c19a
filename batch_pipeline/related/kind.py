"""Related documents, declared: one product (`<collection>_related`) per collection with
`related:`, run by `RelatedPartition` on the score family's executors (or the candidates'
own scores, with no live reranker) over the collection's own collect, complete when every
document of the live index has its list, scored by recall of the links documents carry."""

from typing import ClassVar

from batch_pipeline.config import PipelineConfig, RelatedConfig
from batch_pipeline.declaration import (
    Lines,
    ProductEnv,
    ProductFace,
    ProductKind,
    ProductTarget,
    RunReport,
)
from batch_pipeline.names import related_product_name
from batch_pipeline.related import INDEX, NAME, report
from batch_pipeline.related.partition import RelatedPartition
from batch_pipeline.related.product import RelatedProduct
from batch_pipeline.related.review import LinkRecallScorer, ListsEveryDocumentRule


class RelatedDocuments(ProductFace):
    """A collection's related documents, as a product."""

    report_kind: ClassVar[str] = report.REPORT_KIND
    status_lines: ClassVar[Lines] = staticmethod(report.status_lines)
    health_line = staticmethod(report.health_line)
    product: RelatedProduct

    def run_lines(self, run: RunReport) -> list[str]:
        return report.run_lines(self.product, run)

    def run_groups(self) -> list[list[str]]:
        """The whole collection, one run: a list's candidates are any of its documents."""
        return [[self.product.collection_name]]

    def status(self) -> dict[str, object]:
        return report.product_status(self.product)

    def health(self) -> dict[str, object]:
        return report.product_health(self.product)


def targets(config: PipelineConfig) -> list[ProductTarget]:
    """The related documents of every collection that has `related:`."""
    return [
        ProductTarget(related_product_name(c.name), NAME, c.name)
        for c in config.collections
        if c.related is not None
    ]


def open_related(env: ProductEnv, target: ProductTarget) -> RelatedDocuments:
    return RelatedDocuments(RelatedProduct(env, target.collection))


RELATED = ProductKind(
    name=NAME,
    package="batch_pipeline.related",
    family="score",
    section=RelatedConfig,
    targets=targets,
    open=open_related,
    partition=RelatedPartition,
    rule=ListsEveryDocumentRule,
    scorer=LinkRecallScorer,
    report="batch_pipeline.related.report",
    definitions="batch_pipeline.definitions.related_documents:related_definitions",
    configured_at="collections[].related",
    collection_runs=True,
    inputs=(INDEX,),
    commands="batch_pipeline.cli.related",
)
