"""How the vector index's generations are reviewed by the shared `GenerationReviewer`:
complete once every shard had a full pass and nothing is pending (`FullPassRule`), scored by
retrieval on the collection's evaluation set, in the collection's own search mode
(`RetrievalScorer`). `IndexProduct` (`index.product`) builds the reviewer from them."""

from dataclasses import dataclass, field

from batch_pipeline.config import (
    EvaluationConfig,
)
from batch_pipeline.generations.evaluation import (
    eval_set_version,
    index_model,
    load_eval_set,
    score_generation,
)
from batch_pipeline.generations.review import (
    Completeness,
    EmbedderFor,
)
from batch_pipeline.state.retrieval import DEFAULT_PARAMS, VECTOR, VectorParams
from batch_pipeline.state.tracking import GenerationRecord
from batch_pipeline.state.vector_store import VectorStore


def table_version(store: VectorStore, index: str) -> int | None:
    table = store.open(index)
    return table.version if table is not None else None


@dataclass(frozen=True)
class FullPassRule:
    """Complete once every shard had a full pass and nothing is pending (`track` records it
    after each land)."""

    store: VectorStore

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        key = {
            "complete": bool(record.complete),
            "documents": record.documents,
            "version": table_version(self.store, record.index_name),
        }
        return Completeness(bool(record.complete), None, key)


@dataclass(frozen=True)
class RetrievalScorer:
    """Recall@k and MRR@k on the collection's evaluation set (queries with their relevant
    documents), searched in each generation's own table with its own model, in the
    collection's search mode: the gate measures what readers get."""

    store: VectorStore
    evaluation: EvaluationConfig
    floors: dict[str, float] = field(default_factory=dict)
    mode: str = VECTOR  # ranked as the collection's search ranks (`index.search`)
    params: VectorParams = DEFAULT_PARAMS  # and its ANN index searched as search does

    @property
    def tolerance(self) -> float:
        return self.evaluation.tolerance

    def key(self, record: GenerationRecord) -> dict[str, object]:
        return {
            "eval_set": eval_set_version(self.evaluation.path),
            "k": self.evaluation.k,
            "version": table_version(self.store, record.index_name),
            "mode": self.mode,
            "params": [self.params.nprobes, self.params.refine_factor],
        }

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        model = index_model(record)
        return score_generation(
            self.store,
            record.index_name,
            embedder_for(model),
            load_eval_set(self.evaluation.path),
            self.evaluation.k,
            model.query_prefix,
            mode=self.mode,
            params=self.params,
        )
