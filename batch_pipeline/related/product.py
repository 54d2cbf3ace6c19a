"""A collection's related documents, the product: what each of its runs reads (the live index
generation, the live reranker), the generation they build (its fingerprint: the settings, the
index generation and the reranker generation), the executor that scores, and the generations'
record, review and live pointer (`ReviewedGenerations`, with the rule and scorer of
`related.review`). `RelatedPartition` (`related.partition`) runs its stages.

A new live index generation, or a newly promoted reranker, is another related generation,
built in full beside the live one and reviewed before readers follow it.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from batch_pipeline.config import CollectionConfig, RelatedConfig, RerankerConfig
from batch_pipeline.declaration import CollectionDocuments, ProductEnv, input_product
from batch_pipeline.executors.scoring import configured_reranker, score_executor
from batch_pipeline.generations.review import NoLiveGenerationError, ReviewedGenerations
from batch_pipeline.names import related_product_name, reranker_product_name
from batch_pipeline.related import INDEX, NAME
from batch_pipeline.related.candidates import LiveIndex
from batch_pipeline.related.executor import CANDIDATES, CandidateScores
from batch_pipeline.related.partition import RelatedPartition
from batch_pipeline.related.prepare import LandedList
from batch_pipeline.related.review import LinkRecallScorer, ListsEveryDocumentRule
from batch_pipeline.state.retrieval import VectorParams
from batch_pipeline.state.tracking import GenerationRecord

RECIPE = "related-1"  # how candidates are found and lists kept: a change is a new generation


@dataclass(frozen=True)
class CandidateOrder:
    """What scores the pairs where no reranker is live: the candidates' own scores."""

    name: str
    fingerprint: str


class RelatedProduct(ReviewedGenerations):
    """A collection's related documents (see the module docstring)."""

    def __init__(self, env: ProductEnv, collection: str) -> None:
        self.env = env
        self.config, self.storage = env.config, env.storage
        self.tracking, self.store = env.tracking, env.store
        self.collection_name = collection
        self.documents_for: Callable[[str], CollectionDocuments] = env.documents_for
        self.execution = env.execution

    @cached_property
    def collection(self) -> CollectionConfig:
        return self.config.configured(self.collection_name)

    @cached_property
    def settings(self) -> RelatedConfig:
        return self.config.collection_section(self.collection_name, "related", "related documents")

    @property
    def name(self) -> str:
        return related_product_name(self.collection_name)

    def partition(self, key: str) -> RelatedPartition:
        return RelatedPartition(self, key)

    # ------------------------------------------------------------- what it reads

    @cached_property
    def index_product(self) -> str:
        """The collection's vector index, a declared input (`ProductKind.inputs`)."""
        return input_product(self.config, NAME, INDEX, self.collection_name)

    @cached_property
    def live_index(self) -> GenerationRecord:
        """The live index generation the candidates come from, or NoLiveGenerationError."""
        live = self.registry.live(self.index_product)
        if live is None or not self.store.has_table(live.index_name):
            raise NoLiveGenerationError(
                f"{self.collection_name!r} has no live index to find related documents in; "
                f"run the collection first (batch-pipeline run --collection {self.collection_name})"
            )
        return live

    @cached_property
    def live_reranker(self) -> GenerationRecord | None:
        """The collection's live reranker, where it was reviewed on the live index
        generation (`index.reranker`): it scores the candidates; None, their own scores do."""
        live = self.registry.live(reranker_product_name(self.collection_name))
        if live is None:
            return None
        config = json.loads(live.model_config)
        return live if config.get("index_generation") == self.live_index.index_name else None

    def live_index_reader(self) -> LiveIndex:
        return LiveIndex(
            self.store, self.live_index.index_name, VectorParams.of(self.collection.index.vector)
        )

    @cached_property
    def reranker(self):  # noqa: ANN201 - a ResolvedReranker or ResolvedJudge, or None
        if self.live_reranker is None:
            return None
        config = RerankerConfig.model_validate(
            json.loads(self.live_reranker.model_config)["reranker"]
        )
        return configured_reranker(config, self.storage.home)

    @property
    def model(self):  # noqa: ANN201 - what scores the pairs, by name and fingerprint
        if self.reranker is not None:
            return CandidateOrder(self.reranker.name, self.live_reranker.fingerprint)
        return CandidateOrder(CANDIDATES, self.live_index.fingerprint)

    @property
    def executor(self):  # noqa: ANN201 - the score family's, or CandidateScores
        """The score executor the run names, on the live reranker; without one, the
        candidates' own scores (no model)."""
        if self.reranker is None:
            return CandidateScores()
        return score_executor(self.reranker, self.execution)

    # ------------------------------------------------------------- what it builds

    def generation_config(self) -> dict:
        return {
            "k": self.settings.k,
            "candidates": self.settings.candidates,
            "recipe": RECIPE,
            "index_generation": self.live_index.index_name,
            "reranker_generation": self.live_reranker.index_name if self.live_reranker else None,
        }

    def landed_lists(self, index: str | None = None) -> dict[str, LandedList]:
        """Each listed document's list, as built: its version and its related documents'."""
        lists: dict[str, LandedList] = {}
        columns = ["doc_id", "doc_version", "related_id", "related_version"]
        for batch in self.store.scan_batches(index or self.index, columns):
            for doc_id, version, related, related_version in zip(
                *(batch[c].to_pylist() for c in columns), strict=True
            ):
                lists.setdefault(doc_id, LandedList(version, {})).related[related] = related_version
        return lists

    def titles(self, doc_ids: list[str]) -> dict[str, str]:
        """These documents' titles, as the live index holds them."""
        passages = self.live_index_reader().passages(doc_ids)
        return {doc_id: passage.title for doc_id, passage in passages.items()}

    def related_of(self, doc_id: str, index: str) -> list[dict]:
        """A document's landed list in `index`, best first."""
        from batch_pipeline.state.vector_store import sql_literal

        rows = self.store.scan(
            index, ["related_id", "rank", "score", "model_name"], f"doc_id = {sql_literal(doc_id)}"
        ).to_pylist()
        return sorted(rows, key=lambda row: row["rank"])

    # -------------------------------------------------------------- generations

    def completeness_rule(self) -> ListsEveryDocumentRule:
        return ListsEveryDocumentRule()

    def scorer(self) -> LinkRecallScorer | None:
        evaluation = self.settings.evaluation
        return LinkRecallScorer(self.store, evaluation, self.settings.k) if evaluation else None

    @property
    def no_live_hint(self) -> str:
        return (
            f"run it first (batch-pipeline run --collection {self.collection_name} --kind {NAME})"
        )
