"""Related documents: every document's most related documents, on the collections' partitions.

collect is the collection's own `source_documents` -> prepare (`related_candidates`, after the
partition's `vector_index` has landed: the candidates come from the live index) -> plan
(`related_plan`) -> execute (`related_scores`, in the `gpu` pool: a reranker may run there)
-> land (`related_documents`, which reviews the generation). For a collection without
`related:`, `related_candidates` materialises nothing and the rest are skipped. The builder
(`assets.product_stages`) writes the four stage assets, each calling `batch_pipeline.related`.
"""

from assets.namespace import pipeline_of
from assets.product_stages import Context, ProductAssets, family_resources, open_declared
from batch_pipeline.declaration import Product
from batch_pipeline.related import RELATED_STAGES
from batch_pipeline.related.kind import RELATED
from batch_pipeline.runs.partition import StagedPartition

RELATED_GROUP = "related_documents"
INDEX_LAND = "vector_index"  # the partition's index land: the candidates are read from it

RELATED_COLUMN_DESCRIPTIONS = {
    "doc_id": "The document whose list this row is part of.",
    "related_id": "A related document.",
    "rank": "Its place in the document's list (1: most related).",
    "score": "The live reranker's score of the pair, or the candidate's hybrid score.",
    "candidate_rank": "Its place among the document's candidates from the index.",
    "candidate_score": "Hybrid search's fused score of its best chunk.",
    "doc_version": "The document's content hash the list was built from.",
    "related_version": "The related document's content hash then.",
    "input_hash": "The pair's staleness key: both versions and the generation's fingerprint.",
    "query": "What the reranker reads of the document (its title).",
    "document": "What the reranker reads of the candidate (its title and first chunk).",
    "score_at": "When the pair was scored.",
}


def _opened(context: Context) -> tuple[Product, StagedPartition] | None:
    """The partition's collection's related documents, or None when it has none, or while
    its index has no live generation to find candidates in (the run then builds none, and
    says so, rather than failing)."""
    collection, _shard = pipeline_of(context).config.locate(context.partition_key)
    if collection.related is None:
        return None
    product, partition = open_declared(RELATED)(context)
    related = product.product
    if related.registry.live(related.index_product) is None:
        context.log.info(f"{collection.name} has no live index yet: no related documents")
        return None
    return product, partition


RELATED_ASSETS = ProductAssets(
    stages=RELATED_STAGES,
    open=_opened,
    group_name=RELATED_GROUP,
    resources=family_resources(RELATED),  # the scoring resource chooses the score executor
    columns=RELATED_COLUMN_DESCRIPTIONS,
    prepare_deps=(INDEX_LAND,),
    optional=True,
)
