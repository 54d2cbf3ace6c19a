"""The fourth batch product: related documents, a help centre's "related articles".

For every document of a collection, its `k` most related documents: candidates from the
collection's live vector index (each document's mean vector and its title, ranked by hybrid
search), scored by the collection's live reranker where one is promoted, else kept in the
candidates' own order. Its own parts:

- `candidates`: documents' versions, vectors and passages read from the live index, and each
  document's candidates;
- `prepare`: which documents' lists are stale ("the changed documents plus their
  neighbours"), and their candidate pairs;
- `land`: each stale document's list replaced by its best `k`, in one commit;
- `product`, `partition`, `review`, `report`, `kind`: the product on the frame.

Collect is the collection's own (`source_documents`); plan and execute are the score family's
(`stages.score`) on a reranker, or `executor.CandidateScores` without one.
"""

from batch_pipeline.stages import COLLECT, Stage

NAME = "related"  # the kind's name (`run --kind related`)
INDEX = "index"  # the kind whose live generation it reads: declared, resolved by the frame

RELATED_PREPARE = Stage(
    "prepare",
    "related_candidates",
    "candidates",
    frozenset({"python", "lancedb", "parquet"}),
    "find the stale lists (changed documents and their neighbours) and their candidates",
)
RELATED_PLAN = Stage(
    "plan",
    "related_plan",
    "plan",
    frozenset({"python", "parquet"}),
    "count each candidate pair's tokens and pack them under the budget",
)
RELATED_EXECUTE = Stage(
    "execute",
    "related_scores",
    "scores",
    frozenset({"python", "parquet"}),
    "score every candidate pair with the live reranker (or keep the candidates' scores)",
)
RELATED_LAND = Stage(
    "land",
    "related_documents",
    None,
    frozenset({"lancedb"}),
    "replace each stale document's list by its best k and drop the lists of deleted ones",
)

RELATED_STAGES: tuple[Stage, ...] = (
    COLLECT,
    RELATED_PREPARE,
    RELATED_PLAN,
    RELATED_EXECUTE,
    RELATED_LAND,
)
