"""How related documents' generations are reviewed by the shared `GenerationReviewer`:
complete once every document of the live index has its list (`ListsEveryDocumentRule`),
scored by recall@k and MRR@k of the pages documents already link as related
(`LinkRecallScorer`: a labelled set of {doc_id, related: [doc ids]}, such as the sample
handbook's "Related articles" sections, `related.links`)."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from batch_pipeline.config import RelatedEvaluationConfig
from batch_pipeline.generations.evaluation import EvalSetError, eval_set_version
from batch_pipeline.generations.review import Completeness, EmbedderFor
from batch_pipeline.state.tracking import GenerationRecord
from batch_pipeline.state.vector_store import VectorStore


class ListsEveryDocumentRule:
    """Complete once a run has listed every document of the live index (`full_pass`)."""

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        key = {"documents": record.documents, "rows": record.rows, "full": record.full_pass}
        if record.full_pass:
            return Completeness(True, None, key)
        return Completeness(
            False, f"not complete: {record.documents} documents have a list, not every one", key
        )


def load_links(path: Path) -> dict[str, frozenset[str]]:
    """The labelled links: each document's related pages (an EvalSetError naming the line)."""
    links: dict[str, frozenset[str]] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            links[str(item["doc_id"])] = frozenset(map(str, item["related"]))
        except (ValueError, KeyError, TypeError) as error:
            raise EvalSetError(f"{path}:{number}: expected doc_id and related ({error})") from None
    if not links:
        raise EvalSetError(f"{path}: no documents")
    return links


def link_scores(lists: dict[str, list[str]], links: dict[str, frozenset[str]], k: int) -> dict:
    """Recall@k and MRR@k of the linked pages among each labelled document's list."""
    recall, reciprocal = [], []
    for doc_id, linked in links.items():
        if not linked:
            continue
        found = lists.get(doc_id, [])[:k]
        hits = [i for i, related in enumerate(found) if related in linked]
        recall.append(len(set(found) & linked) / len(linked))
        reciprocal.append(1.0 / (hits[0] + 1) if hits else 0.0)
    return {
        f"link_recall_at_{k}": round(float(np.mean(recall)), 4) if recall else 0.0,
        f"link_mrr_at_{k}": round(float(np.mean(reciprocal)), 4) if reciprocal else 0.0,
        "documents": len(recall),
    }


@dataclass(frozen=True)
class LinkRecallScorer:
    """Recall@k and MRR@k of the labelled links in each generation's lists."""

    store: VectorStore
    evaluation: RelatedEvaluationConfig
    k: int
    floors: dict[str, float] = field(default_factory=dict)

    @property
    def tolerance(self) -> float:
        return self.evaluation.tolerance

    def key(self, record: GenerationRecord) -> dict[str, object] | None:
        table = self.store.open(record.index_name)
        if table is None:
            return None
        return {"links": eval_set_version(self.evaluation.path), "version": table.version}

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        rows = self.store.scan(record.index_name, ["doc_id", "related_id", "rank"]).to_pylist()
        lists: dict[str, list[tuple[int, str]]] = {}
        for row in rows:
            lists.setdefault(row["doc_id"], []).append((row["rank"], row["related_id"]))
        ordered = {d: [r for _, r in sorted(found)] for d, found in lists.items()}
        return link_scores(ordered, load_links(self.evaluation.path), self.k)
