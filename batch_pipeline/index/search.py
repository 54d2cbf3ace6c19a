"""Search over a collection's live LanceDB table, as retrieval readers search it: by vector,
by text (BM25) or both (hybrid), with `where` filters, and hybrid's top candidates reordered
by the collection's live reranker (`rerank`, `index.reranker`)."""

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from batch_pipeline.config import load_config
from batch_pipeline.generations.review import NoLiveGenerationError
from batch_pipeline.index.product import IndexProduct
from batch_pipeline.index.reranker import RerankRefusedError, reranked
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.state.retrieval import (
    HYBRID,
    MODES,
    TEXT,
    FullTextMissingError,
    ranked_rows,
)
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.vector_store import sql_literal


@dataclass(frozen=True)
class SearchHit:
    rank: int
    score: float
    doc_id: str
    chunk_id: str
    title: str | None
    section: str | None
    text: str
    metadata: dict = field(default_factory=dict)  # declared fields and the rest, together

    def as_dict(self) -> dict:
        return asdict(self)


class CollectionNotIndexedError(NoLiveGenerationError):
    """Search on a collection whose live table cannot be read as asked (missing, or without
    the index the mode needs): the command line reports it as it reports no live
    generation, in one line."""


class WhereError(ValueError):
    """A `--where` filter that cannot be used; the message says where and why."""


# What a filter may name besides the declared metadata fields, and those fields' types.
FILTERABLE = {"doc_id": "string", "title": "string", "section": "string", "chunk_index": "int"}
_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?)"
    r"|(?P<op>!=|<=|>=|=|<|>)|(?P<word>[A-Za-z_][A-Za-z0-9_]*))"
)


def _tokens(text: str) -> list[tuple[str, str]]:
    found, at = [], 0
    while at < len(text.rstrip()):
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise WhereError(f"--where: cannot read {text[at:].strip()[:30]!r}")
        kind = match.lastgroup
        found.append((kind, match.group(kind)))
        at = match.end()
    return found


def where_filter(text: str, fields: dict[str, str]) -> tuple[str, set[str]]:
    """A LanceDB filter from `field op value [AND ...]`: fields must be declared metadata
    fields (or doc_id, title, section, chunk_index), values literals of the field's type. The
    filter is rebuilt from the parsed parts, strings escaped; the input is never passed on.
    Returns the filter and the fields it names."""
    allowed = {**FILTERABLE, **fields}
    tokens = _tokens(text)
    if not tokens:
        raise WhereError("--where: empty filter")
    parts, named, i = [], set(), 0
    while True:
        if i + 3 > len(tokens):
            raise WhereError("--where: expected `field op value`, e.g. product = 'billing'")
        (kind, name), (op_kind, op), (value_kind, value) = tokens[i : i + 3]
        if kind != "word" or name not in allowed:
            known = ", ".join(sorted(allowed))
            raise WhereError(f"--where: unknown field {name!r}; fields: {known}")
        if op_kind != "op":
            raise WhereError(f"--where: expected one of = != < <= > >= after {name}, not {op!r}")
        parts.append(f"{name} {op} {_literal(name, allowed[name], value_kind, value)}")
        named.add(name)
        i += 3
        if i == len(tokens):
            return " AND ".join(parts), named
        joiner_kind, joiner = tokens[i]
        if joiner_kind != "word" or joiner.upper() != "AND":
            raise WhereError(f"--where: expected AND, not {joiner!r}")
        i += 1


INT_RANGE = range(-(2**63), 2**63)  # what an int column (int64) can hold


def _literal(name: str, kind: str, value_kind: str, value: str) -> str:
    """The value as a literal of the field's type, checked here: the table never sees a
    value its column cannot hold."""
    if kind == "string" and value_kind == "string":
        return sql_literal(value[1:-1].replace("''", "'"))
    if kind == "int" and value_kind == "number" and "." not in value and int(value) in INT_RANGE:
        return str(int(value))
    if kind == "float" and value_kind == "number":
        return str(float(value))
    if kind == "bool" and value_kind == "word" and value.lower() in ("true", "false"):
        return value.upper()
    article = "an" if kind == "int" else "a"
    raise WhereError(f"--where: {name} is {kind}; {value!r} is not {article} {kind} literal")


MAX_RESULTS = 1000  # a search is for reading; a bulk export reads the table itself


def open_collection(
    name: str, config_path: str | Path | None = None, home: str | Path | None = None
) -> IndexProduct:
    """A collection to search, as a reader's service opens it: by its name in the
    configuration (`BATCH_PIPELINE_CONFIG` or `pipeline.yaml` by default) over the pipeline's
    home (`BATCH_PIPELINE_HOME` or `.batch_pipeline`). Open it once and search it often: the
    embedding model is loaded by the first vector or hybrid search."""
    config = load_config(config_path)
    return IndexProduct(config, resolve_storage(str(home) if home else None), name)


def search(
    pipeline: IndexProduct,
    query: str,
    k: int = 5,
    runner: Embedder | None = None,
    where: str | None = None,
    mode: str | None = None,
    rerank: bool = False,
) -> list[SearchHit]:
    """The `k` chunks best ranked for `query` in `mode` (the collection's `index.search` by
    default; see `state.retrieval`: vector by cosine, text by BM25, hybrid fused by
    reciprocal rank), among those matching `where` (see `where_filter`). A hit's score is the
    cosine similarity (vector; 1.0 is identical), the BM25 score (text), the fused score
    (hybrid) or the reranker's. With `briefs.index_questions`, the live briefs' questions
    compete with the chunks (section `question`; they hold no metadata, so a `where` on a
    metadata field leaves them out).

    With `rerank`, hybrid search's top `reranker.candidates` rows are reordered by the live
    reranker's scores (a hit's score is then the reranker's); a collection whose reranker may
    not be used (none configured, or not promoted by its review) is a RerankRefusedError
    saying why, in one line."""
    if not 1 <= k <= MAX_RESULTS:
        raise ValueError(f"-k must be between 1 and {MAX_RESULTS}, not {k}")
    if rerank and mode not in (None, HYBRID):
        raise ValueError(f"--rerank reorders hybrid search's candidates, not {mode} search's")
    mode = HYBRID if rerank else mode or pipeline.collection.index.search
    if mode not in MODES:
        raise ValueError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
    scorer = None
    if rerank:
        if pipeline.reranking is None:
            raise RerankRefusedError(
                f"--rerank: {pipeline.name} has no reranker (collections[].reranker)"
            )
        scorer = pipeline.reranking.live_scorer()
    fields = dict(pipeline.collection.metadata.fields)
    condition, named = where_filter(where, fields) if where else (None, set())
    live = pipeline.live()  # readers follow the live generation
    table = pipeline.store.open(live.index)
    if table is None:
        raise CollectionNotIndexedError(f"the live table {live.index!r} is missing")
    present = set(table.schema.names)
    if condition is not None:
        missing = sorted(named - present)
        if missing:
            raise WhereError(
                f"--where: the live table has no column {missing[0]!r} yet; run the pipeline "
                "once since declaring it"
            )
    vector = None
    if mode != TEXT:
        model = pipeline.model_for(live.record)
        if runner is None or runner.resolved != model:  # measured, exported, quantized: in the home
            runner = EmbeddingRunner(
                model, calibration_cache=pipeline.storage.home / CALIBRATION_FILE
            )
        vector = runner.embed([model.query_prefix + query])[0]
    declared = [name for name in fields if name in present]
    extra = [*declared, "metadata"] if "metadata" in present else declared
    columns = ["doc_id", "chunk_id", "title", "section", "text", *extra]
    # question rows hold no metadata: no `where` matches them, and a table that landed before
    # a field was declared has no column to filter on
    tables = pipeline.search_tables(live.index) if condition is None else [table]
    depth = max(k, pipeline.reranking.candidates) if scorer is not None else k
    try:
        params = pipeline.vector_params
        rows = ranked_rows(tables, query, vector, mode, depth, condition, columns, params)
    except FullTextMissingError as error:
        raise CollectionNotIndexedError(f"--mode {mode}: {error}") from None
    if scorer is not None:
        rows = reranked(rows, query, scorer)[:k]
    return [
        SearchHit(
            rank=i + 1,
            score=round(float(row["score"]), 4),
            doc_id=row["doc_id"],
            chunk_id=row["chunk_id"],
            title=row.get("title"),
            section=row.get("section"),
            text=row.get("text") or "",
            metadata={
                **json.loads(row.get("metadata") or "{}"),
                **{name: row[name] for name in declared if row.get(name) is not None},
            },
        )
        for i, row in enumerate(rows)
    ]
