"""The briefs' two parts of the shared generation review (`batch_pipeline.generations.review`):
its completeness rule and its scorer.

- Complete: the generation holds a brief of every document its last full pass saw.
- Scores:
  - `valid_share`: valid briefs over briefs and failed documents; `min_valid_share` is its
    floor (0.99 by default).
  - `audience_accuracy` on a labelled set of documents (a missing brief counts as wrong).
  - `faithfulness`: the share of summaries nearer (cosine, both embedded with the
    collection's embedding model) to their own document than to any other document. A
    document's vector is the mean of its chunks' vectors in the collection's live index;
    on a large collection a fixed sample of `FAITHFULNESS_SAMPLE` documents is compared.

The gate compares audience accuracy and faithfulness with live's under one tolerance.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batch_pipeline.briefs.store import BriefStore
from batch_pipeline.config import BriefsConfig
from batch_pipeline.generations.evaluation import eval_set_version
from batch_pipeline.generations.review import Completeness, EmbedderFor
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore

FAITHFULNESS_SAMPLE = 1000
AUDIENCE = "audience"
SUMMARY = "summary"

# The collection's live index as document vectors: (doc ids, unit vectors, index name), or
# None when the collection has no live index yet.
DocumentVectors = Callable[[], tuple[list[str], np.ndarray, str] | None]


class LabelledBriefsError(ValueError):
    """A labelled set that cannot be read; the message names the line."""


def load_labelled_audiences(path: Path, audiences: list[str] | None) -> dict[str, str]:
    """doc_id -> the right audience, from a JSONL of {doc_id, audience}."""
    labelled: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            doc_id, audience = str(row["doc_id"]), str(row["audience"])
        except (ValueError, KeyError, TypeError) as error:
            raise LabelledBriefsError(
                f"{Path(path).name} line {number}: not a {{doc_id, audience}} object ({error})"
            ) from None
        if audiences is not None and audience not in audiences:
            raise LabelledBriefsError(
                f"{Path(path).name} line {number}: audience {audience!r} is not one of "
                f"{', '.join(audiences)}"
            )
        labelled[doc_id] = audience
    return labelled


@dataclass(frozen=True)
class CoversCollectionRule:
    """Complete when the generation holds a brief of every document of its last full pass."""

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        key = {"rows": record.rows, "documents": record.documents, "full_pass": record.full_pass}
        if record.full_pass and record.documents and record.rows >= record.documents:
            return Completeness(True, None, key)
        if not record.full_pass:
            reason = "not complete: no full pass has landed yet"
        else:
            missing = record.documents - record.rows
            reason = (
                f"not complete: {missing} of {record.documents} documents have no valid brief "
                "(`batch-pipeline failures` says why; the next run retries them)"
            )
        return Completeness(False, reason, key)


def _sampled(doc_ids: list[str], limit: int) -> set[str]:
    """A fixed sample of the ids (the same on every run): the lowest id hashes."""
    if len(doc_ids) <= limit:
        return set(doc_ids)
    ranked = sorted(doc_ids, key=lambda d: hashlib.sha1(d.encode("utf-8")).hexdigest())
    return set(ranked[:limit])


def faithfulness(
    summaries: dict[str, str], doc_ids: list[str], vectors: np.ndarray, embed: Callable
) -> float | None:
    """The share of summaries nearer their own document than any other (see the module
    docstring); None when fewer than two briefed documents have vectors."""
    position = {d: i for i, d in enumerate(doc_ids)}
    chosen = sorted(_sampled([d for d in summaries if d in position], FAITHFULNESS_SAMPLE))
    if len(chosen) < 2:
        return None
    rows = vectors[[position[d] for d in chosen]]
    embedded = np.asarray(embed([summaries[d] for d in chosen]), dtype=np.float32)
    embedded /= np.linalg.norm(embedded, axis=1, keepdims=True).clip(min=1e-12)
    similarity = embedded @ rows.T  # summary i against the chosen documents
    own = np.diag(similarity).copy()  # a view otherwise: the next line would overwrite it
    np.fill_diagonal(similarity, -np.inf)
    return float(np.mean(own > similarity.max(axis=1)))


@dataclass(frozen=True)
class BriefScorer:
    """Valid share, audience accuracy and faithfulness (see the module docstring)."""

    settings: BriefsConfig
    briefs: BriefStore
    tracking: TrackingStore
    model: ResolvedModel  # the collection's embedding model
    document_vectors: DocumentVectors
    audiences: list[str] | None

    @property
    def tolerance(self) -> float:
        evaluation = self.settings.evaluation
        return evaluation.tolerance if evaluation is not None else 0.0

    @property
    def floors(self) -> dict[str, float]:
        return {"valid_share": self.settings.min_valid_share}

    def key(self, record: GenerationRecord) -> dict[str, object]:
        evaluation = self.settings.evaluation
        table = self.briefs.store.open(record.index_name)
        vectors = self.document_vectors()
        return {
            "table_version": table.version if table is not None else None,
            "failures": self.tracking.failure_count(record.index_name),
            "eval_set": eval_set_version(evaluation.path) if evaluation is not None else None,
            "index": vectors[2] if vectors is not None else None,
        }

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        rows = self.briefs.rows(record.index_name)
        failed = self.tracking.failure_count(record.index_name)
        scores = {"valid_share": len(rows) / (len(rows) + failed) if rows or failed else 0.0}
        by_doc = {r["doc_id"]: r for r in rows}
        evaluation = self.settings.evaluation
        if evaluation is not None and rows and AUDIENCE in rows[0]:
            labelled = load_labelled_audiences(evaluation.path, self.audiences)
            right = sum(
                1 for d, audience in labelled.items() if by_doc.get(d, {}).get(AUDIENCE) == audience
            )
            scores["audience_accuracy"] = right / len(labelled) if labelled else 0.0
        vectors = self.document_vectors()
        if vectors is not None and rows and SUMMARY in rows[0]:
            doc_ids, matrix, _index = vectors
            summaries = {d: str(r[SUMMARY]) for d, r in by_doc.items() if r.get(SUMMARY)}
            embedder = embedder_for(self.model)
            share = faithfulness(summaries, doc_ids, matrix, embedder.embed)
            if share is not None:
                scores["faithfulness"] = share
        return scores
