"""Prepare for related documents: which documents' lists are stale, and their candidate pairs.

The seed's triggered batch, "the changed documents plus their neighbours". Against the live
index generation's documents and versions, a document's list is stale when:

1. the document is new or changed (its version is not the one its list was built from);
2. a document on its list changed or went (a listed version is not the current one);
3. a changed document is among its candidates, so may now enter its list (its neighbours:
   the changed document's own candidates, `candidates` says why these).

A document no longer in the index has its list deleted (under the frame's mass-deletion
guard). Every stale document's candidates are written as (query, document) pairs, the
document's passage as the query and each candidate's as the document, keyed by both
versions and the generation's fingerprint: a rerun with nothing changed writes none.
"""

import hashlib
import time
from dataclasses import dataclass, field

import pyarrow as pa

from batch_pipeline.related.candidates import LiveIndex, Passage
from batch_pipeline.state.staging import StagePath, StageWriter

PREPARED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("related_id", pa.string(), nullable=False),
        pa.field("candidate_rank", pa.int32(), nullable=False),
        pa.field("candidate_score", pa.float32(), nullable=False),
        pa.field("doc_version", pa.string(), nullable=False),
        pa.field("related_version", pa.string(), nullable=False),
        pa.field("input_hash", pa.string(), nullable=False),
        pa.field("query", pa.large_string(), nullable=False),
        pa.field("document", pa.large_string(), nullable=False),
    ]
)
WRITE_EVERY = 256  # stale documents' candidates written at a time


@dataclass(frozen=True)
class LandedList:
    """What a document's landed list was built from: its version and its related documents'."""

    version: str
    related: dict[str, str]  # related doc id -> its version then


@dataclass
class RelatedPrepareSummary:
    """Why each stale list is stale, how many pairs were written, and what goes."""

    documents: int = 0  # in the live index
    changed: int = 0  # new or changed documents
    listing_changed: int = 0  # lists holding a changed or deleted document
    neighbours: int = 0  # lists a changed document may now enter
    stale: list[str] = field(default_factory=list)  # every stale list's document
    pairs: int = 0
    deleted: list[str] = field(default_factory=list)  # documents gone from the index

    def metadata(self) -> dict[str, object]:
        return {
            "documents": self.documents,
            "lists_stale": len(self.stale),
            "stale_changed": self.changed,
            "stale_listing_changed": self.listing_changed,
            "stale_neighbours": self.neighbours,
            "candidate_pairs": self.pairs,
            "lists_deleted": len(self.deleted),
        }

    def facts(self) -> dict[str, object]:
        """What land reads back from the prepared file's footer."""
        return {"stale": self.stale, "deleted": self.deleted, "documents": self.documents}


def pair_key(
    fingerprint: str, doc_id: str, version: str, related: str, related_version: str
) -> str:
    """A candidate pair's staleness key: both documents' versions under the generation."""
    text = "\x1f".join((fingerprint, doc_id, version, related, related_version))
    return hashlib.sha256(text.encode()).hexdigest()


def stale_by_version(
    current: dict[str, str], landed: dict[str, LandedList]
) -> tuple[list[str], set[str]]:
    """The documents of the live index (`current`: their versions) whose list is missing or
    was built from another version of them, and, apart from those, the lists naming a
    document changed or deleted since: stale without a candidate search (their neighbours,
    which need one, are prepare's)."""
    changed = sorted(
        d for d, version in current.items() if landed.get(d) is None or landed[d].version != version
    )
    listing = {
        d
        for d, built in landed.items()
        if d in current and any(current.get(r) != v for r, v in built.related.items())
    } - set(changed)
    return changed, listing


def prepare_related(
    live: LiveIndex,
    landed: dict[str, LandedList],
    out: StagePath,
    candidates: int,
    fingerprint: str,
) -> RelatedPrepareSummary:
    """The stale lists' candidate pairs into `out` (see the module docstring)."""
    started = time.perf_counter()
    current = live.versions()
    summary = RelatedPrepareSummary(documents=len(current))
    changed, listing = stale_by_version(current, landed)
    found: dict[str, list[tuple[str, float]]] = {}  # candidates computed, by document
    neighbours: set[str] = set()
    if len(changed) < len(current):  # not every list is stale already: find the neighbours
        found.update(_candidates(live, changed, candidates))
        neighbours = {c for d in changed for c, _ in found.get(d, [])} - set(changed) - listing
    stale = sorted({*changed, *listing, *neighbours})
    summary.changed, summary.listing_changed = len(changed), len(listing)
    summary.neighbours, summary.stale = len(neighbours), stale
    summary.deleted = sorted(set(landed) - set(current))
    with StageWriter(out, PREPARED_SCHEMA, started) as writer:
        for start in range(0, len(stale), WRITE_EVERY):
            chunk = stale[start : start + WRITE_EVERY]
            passages = live.passages(chunk)  # their titles find their candidates
            todo = [d for d in chunk if d not in found]
            lists = {
                **{d: found[d] for d in chunk if d in found},
                **dict(_candidates(live, todo, candidates, passages)),
            }
            others = {c for d in chunk for c, _ in lists.get(d, [])} - passages.keys()
            passages.update(live.passages(sorted(others)))
            rows = []
            for doc_id in chunk:
                query = passages.get(doc_id)
                for rank, (related, score) in enumerate(lists.get(doc_id, []), start=1):
                    if query is None or related not in passages or related not in current:
                        continue
                    rows.append(
                        {
                            "doc_id": doc_id,
                            "related_id": related,
                            "candidate_rank": rank,
                            "candidate_score": score,
                            "doc_version": current[doc_id],
                            "related_version": current[related],
                            "input_hash": pair_key(
                                fingerprint, doc_id, current[doc_id], related, current[related]
                            ),
                            "query": query.query,
                            "document": passages[related].document,
                        }
                    )
            writer.write_table(pa.Table.from_pylist(rows, PREPARED_SCHEMA))
            summary.pairs += len(rows)
        writer.summary = summary.facts()
    return summary


def _candidates(
    live: LiveIndex, doc_ids: list[str], count: int, passages: dict[str, Passage] | None = None
) -> list[tuple[str, list[tuple[str, float]]]]:
    """Each document's candidates (its title from its passage, read unless given; its
    vector)."""
    if not doc_ids:
        return []
    passages = passages if passages is not None else live.passages(doc_ids)
    return [
        (doc_id, live.candidates(doc_id, passages[doc_id].query, vector, count))
        for doc_id, vector in live.vectors(doc_ids)
        if doc_id in passages
    ]
