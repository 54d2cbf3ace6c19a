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
import heapq
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batch_pipeline.briefs.failures import next_run_note
from batch_pipeline.briefs.store import BriefStore
from batch_pipeline.config import BriefsConfig
from batch_pipeline.generations.evaluation import eval_set_version
from batch_pipeline.generations.review import Completeness, EmbedderFor
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore

FAITHFULNESS_SAMPLE = 1000
AUDIENCE = "audience"
SUMMARY = "summary"

# The collection's live index, or None before it has one; and, of a live index, the unit
# vectors of these documents (the mean of each one's chunks), with the ids that have any.
LiveIndex = Callable[[], str | None]
DocumentVectors = Callable[[str, list[str]], tuple[list[str], np.ndarray]]


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
    """Complete when the generation holds a brief of every document of its last full pass.
    With `tracking`, a generation short of briefs says so when a provider still runs some."""

    tracking: TrackingStore | None = None
    tries: int = 1  # invalid outputs a document gets under one key (`invalid_output_tries`)

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        key = {"rows": record.rows, "documents": record.documents, "full_pass": record.full_pass}
        if record.full_pass and record.documents and record.rows >= record.documents:
            return Completeness(True, None, key)
        if not record.full_pass:
            reason = "not complete: no full pass has landed yet"
        else:
            missing = record.documents - record.rows
            failures = (
                {} if self.tracking is None else self.tracking.failures_by_doc(record.index_name)
            )
            reason = (
                f"not complete: {missing} of {record.documents} documents have no valid brief "
                f"({next_run_note(failures, self.tries, missing)})"
            )
        running = self._running(record)
        if running:
            reason = (
                f"not complete: {max(0, record.documents - record.rows)} of {record.documents} "
                f"documents have no brief yet, and {running} provider batches still run (the "
                "next run collects them)"
                if record.full_pass
                else f"not complete: {running} provider batches still run (the next run "
                "collects them)"
            )
        return Completeness(False, reason, key)

    def _running(self, record: GenerationRecord) -> int:
        if self.tracking is None:
            return 0
        return len(self.tracking.provider_batches(record.index_name, uncollected=True))


def _sampled(doc_ids: Iterable[str], limit: int) -> set[str]:
    """A fixed sample of the ids (the same on every run): the `limit` lowest id hashes."""
    ranked = heapq.nsmallest(
        limit, doc_ids, key=lambda d: hashlib.sha1(d.encode("utf-8")).hexdigest()
    )
    return set(ranked)


def faithfulness(
    summaries: dict[str, str], doc_ids: list[str], vectors: np.ndarray, embed: Callable
) -> float | None:
    """The share of summaries nearer their own document than any other of `doc_ids` (see
    the module docstring); None when fewer than two briefed documents have vectors."""
    position = {d: i for i, d in enumerate(doc_ids)}
    chosen = sorted(d for d in summaries if d in position)
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
    """Valid share, audience accuracy and faithfulness (see the module docstring). Reads
    the rows it scores, not the table: the labelled documents, and a sample of at most
    `FAITHFULNESS_SAMPLE` documents with their vectors."""

    settings: BriefsConfig
    briefs: BriefStore
    tracking: TrackingStore
    model: ResolvedModel  # the collection's embedding model
    live_index: LiveIndex
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
        return {
            "table_version": table.version if table is not None else None,
            "failures": self.tracking.failure_count(record.index_name),
            "eval_set": eval_set_version(evaluation.path) if evaluation is not None else None,
            "index": self.live_index(),
        }

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        index = record.index_name
        store = self.briefs.store
        briefed = store.count_rows(index) if store.has_table(index) else 0
        failed = self.tracking.failure_count(index)
        scores = {"valid_share": briefed / (briefed + failed) if briefed or failed else 0.0}
        if not briefed:
            return scores
        evaluation = self.settings.evaluation
        if evaluation is not None:
            labelled = load_labelled_audiences(evaluation.path, self.audiences)
            rows = {r["doc_id"]: r for r in self.briefs.rows(index, sorted(labelled))}
            if rows and AUDIENCE in next(iter(rows.values())):
                right = sum(1 for d, a in labelled.items() if rows.get(d, {}).get(AUDIENCE) == a)
                scores["audience_accuracy"] = right / len(labelled) if labelled else 0.0
        live = self.live_index()
        if live is not None:
            sample = sorted(_sampled(self.briefs.doc_ids(index), FAITHFULNESS_SAMPLE))
            rows = {r["doc_id"]: r for r in self.briefs.rows(index, sample)}
            summaries = {d: str(r[SUMMARY]) for d, r in rows.items() if r.get(SUMMARY)}
            if summaries:
                doc_ids, vectors = self.document_vectors(live, sorted(summaries))
                embed = embedder_for(self.model).embed
                share = faithfulness(summaries, doc_ids, vectors, embed)
                if share is not None:
                    scores["faithfulness"] = share
        return scores
