"""How a collection's rows are ranked for a query, the one way search and the generation gate
both rank them (a collection's `index.search`):

- `vector`: nearest by cosine to the query's embedding (through the ANN index where the table
  has one; a flat scan otherwise);
- `text`: LanceDB's BM25 over the full-text indexes (the chunk's text and the title), where
  names, error codes and config keys match as written;
- `hybrid`: both rankings, each `CANDIDATES` deep, fused by reciprocal rank (a row's score is
  the sum over the rankings of 1 / (`RRF_K` + its rank)): a row high in either comes first,
  and one high in both first of all.

Several tables (a generation's, and its question rows') are ranked together. A `where` filter
applies to each ranking before it is cut. A damaged ANN index is bypassed (an exact scan, with
a warning); a damaged or missing full-text index fails a text search naming it, and leaves a
hybrid search to its vector ranking (with a warning), until the next land builds it again.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

VECTOR, TEXT, HYBRID = "vector", "text", "hybrid"
MODES = (VECTOR, TEXT, HYBRID)
RRF_K = 60  # the usual constant of reciprocal-rank fusion: dampens the first ranks' weight
CANDIDATES = 50  # each ranking's depth before fusion (the result's, when larger)
KEY = "chunk_id"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VectorParams:
    """How an ANN index is searched (`index.vector.nprobes`, `refine_factor`); a flat scan
    needs neither."""

    nprobes: int | None = None
    refine_factor: int | None = None

    @classmethod
    def of(cls, settings) -> "VectorParams":  # noqa: ANN001 - a VectorIndexConfig
        return cls(settings.nprobes, settings.refine_factor)


DEFAULT_PARAMS = VectorParams()  # LanceDB's own defaults


class FullTextMissingError(RuntimeError):
    """A text or hybrid search on a table with no full-text index."""


class FullTextDamagedError(FullTextMissingError):
    """A full-text index that cannot be read (a damaged file)."""


def full_text_columns(table) -> list[str]:  # noqa: ANN001 - a LanceDB table
    """The columns of `table` with a full-text index."""
    return [c for index in table.list_indices() if index.index_type == "FTS" for c in index.columns]


def _vector_rows(
    table,
    vector: np.ndarray,
    limit: int,
    where: str | None,  # noqa: ANN001
    columns: list[str],
    params: VectorParams,
) -> list[dict]:
    def run(flat: bool) -> list[dict]:
        query = table.search(vector).metric("cosine")
        if flat:
            query = query.bypass_vector_index()
        else:
            if params.nprobes is not None:
                query = query.nprobes(params.nprobes)
            if params.refine_factor is not None:
                query = query.refine_factor(params.refine_factor)
        if where is not None:
            query = query.where(where, prefilter=True)
        return query.select([*columns, "_distance"]).limit(limit).to_list()

    try:
        rows = run(flat=False)
    except (RuntimeError, OSError) as error:  # a damaged ANN index: the exact scan still reads
        log.warning(
            "the ANN index of %s cannot be read (%s); scanning instead",
            table.name,
            str(error).splitlines()[0][:200],
        )
        rows = run(flat=True)
    for row in rows:
        row["score"] = 1.0 - float(row.pop("_distance"))
    return rows


def _text_rows(
    table,
    text: str,
    limit: int,
    where: str | None,  # noqa: ANN001
    columns: list[str],
) -> list[dict]:
    from lancedb.query import MultiMatchQuery

    indexed = full_text_columns(table)
    if not indexed:
        return []
    query = table.search(MultiMatchQuery(text, indexed), query_type="fts")
    if where is not None:
        query = query.where(where, prefilter=True)
    try:
        rows = query.select([*columns, "_score"]).limit(limit).to_list()
    except (RuntimeError, OSError) as error:
        raise FullTextDamagedError(
            f"the full-text index of {table.name} cannot be read "
            f"({str(error).splitlines()[0][:200]}); the next land builds it again, and "
            "`batch-pipeline doctor` names it"
        ) from None
    for row in rows:
        row["score"] = float(row.pop("_score"))
    return [row for row in rows if row["score"] > 0]  # a row no term matched


def ranked_rows(
    tables: Sequence,
    text: str,
    vector: np.ndarray | None,
    mode: str,
    limit: int,
    where: str | None = None,
    columns: Sequence[str] = (KEY, "doc_id"),
    params: VectorParams = DEFAULT_PARAMS,
) -> list[dict]:
    """The `limit` best rows of `tables` for the query (its `text`, and its `vector` for the
    vector and hybrid modes), best first, each with its `score` (see the module docstring).
    A text or hybrid search of tables none of which has a full-text index is a
    FullTextMissingError."""
    if mode not in MODES:
        raise ValueError(f"search mode must be one of {', '.join(MODES)}, not {mode!r}")
    wanted = list(dict.fromkeys([KEY, *columns]))
    depth = max(limit, CANDIDATES) if mode == HYBRID else limit

    def by_vector() -> list[dict]:
        rows = [
            r
            for t in tables
            for r in _vector_rows(t, vector, depth, where, _held(t, wanted), params)
        ]
        return sorted(rows, key=lambda row: -row["score"])[:depth]

    def by_text() -> list[dict]:
        if not any(full_text_columns(t) for t in tables):
            raise FullTextMissingError(
                "the table has no full-text index yet: it is built by the next land (index."
                "full_text), and `batch-pipeline doctor` says why it is missing"
            )
        rows = [r for t in tables for r in _text_rows(t, text, depth, where, _held(t, wanted))]
        return sorted(rows, key=lambda row: -row["score"])[:depth]

    if mode == VECTOR:
        return by_vector()[:limit]
    if mode == TEXT:
        return by_text()[:limit]
    try:
        texts = by_text()
    except FullTextMissingError as error:  # the vector ranking alone, rather than no answer
        log.warning("hybrid search without its text ranking: %s", error)
        texts = []
    fused: dict[str, dict] = {}
    for ranking in (by_vector(), texts):
        for rank, row in enumerate(ranking, start=1):
            kept = fused.setdefault(row[KEY], {**row, "score": 0.0})
            kept["score"] += 1.0 / (RRF_K + rank)
    return sorted(fused.values(), key=lambda row: -row["score"])[:limit]


def _held(table, columns: list[str]) -> list[str]:  # noqa: ANN001
    names = set(table.schema.names)
    return [c for c in columns if c in names]
