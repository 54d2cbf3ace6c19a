"""A collection's reranker (`collections[].reranker`): hybrid search's top candidates (chunk
rows) reordered by a score-family model's (query, chunk) scores, as `search --rerank` reads.

A reranker can make search much worse (the shipped chat model as a judge takes the handbook's
MRR@10 from 0.88 to 0.39), so it is a generation of its own (`RerankerGenerations`, product
`<collection>_reranker`), reviewed by the one reviewer on the collection's evaluation set:

- its fingerprint is the reranker's identity (a cross-encoder's files, or the judge's chat
  model, prompt and document cut), the candidates it reorders, and the index generation it
  reorders (a new index generation is a new reranker generation, reviewed again);
- it is complete while that index generation is live (`LiveIndexRule`);
- its scores are MRR@10, nDCG@10 and recall@10 of the reranked candidates' documents
  (`RerankScorer`), and the gate promotes it only when it beats hybrid search alone on the
  same candidates (its `Baseline`) on MRR@10 and nDCG@10, and is no worse than a live
  reranker's by more than the evaluation's tolerance.

Search reranks only with the live reranker generation, and only while the index generation it
was reviewed on is live; otherwise `RerankRefusedError` says why, in one line.
"""

import json
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from batch_pipeline.config import EvaluationConfig, RerankerConfig
from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.generations.evaluation import (
    Baseline,
    EvalQuery,
    eval_set_version,
    load_eval_set,
    ranking_scores,
)
from batch_pipeline.generations.review import (
    Completeness,
    EmbedderFor,
    NoLiveGenerationError,
    ReviewedGenerations,
)
from batch_pipeline.inference.fingerprint import fingerprint_of
from batch_pipeline.inference.scorer import Scorer
from batch_pipeline.names import reranker_product_name
from batch_pipeline.state.retrieval import HYBRID, ranked_rows
from batch_pipeline.state.tracking import GenerationRecord

if TYPE_CHECKING:
    from batch_pipeline.index.product import IndexProduct

CUT = 10  # the review ranks the reranked candidates' documents at 10
GATED = ("mrr_at_10", "ndcg_at_10")  # what a reranker must beat hybrid search alone on
CANDIDATE_COLUMNS = ("doc_id", "title", "text")


class RerankRefusedError(NoLiveGenerationError):
    """`search --rerank` on a collection whose reranker may not be used; the message says
    why (none configured, never reviewed, refused by the gate, reviewed on another index
    generation) in one line."""


def passage(row: dict) -> str:
    """What a reranker reads of a candidate row: its document's title and its text."""
    title = row.get("title") or ""
    text = row.get("text") or ""
    return f"{title}\n\n{text}" if title else text


def reranked(rows: list[dict], query: str, scorer: Scorer) -> list[dict]:
    """`rows` in the order of the reranker's scores (ties keep hybrid's order), each row's
    `score` the reranker's and `fused_score` hybrid search's."""
    if not rows:
        return []
    scores = scorer.score([(query, passage(row)) for row in rows])
    order = np.argsort(-scores, kind="stable")
    return [{**rows[i], "score": float(scores[i]), "fused_score": rows[i]["score"]} for i in order]


def open_scorer(config: RerankerConfig, home: Path, device: str = "auto") -> Scorer:
    """The reranker's engine in this process: the cross-encoder (sentence-transformers), or
    the judge on vLLM. Nothing loads until the first score."""
    from batch_pipeline.executors import ExecutorChoice
    from batch_pipeline.executors.scoring import configured_reranker, score_executor

    executor = score_executor(configured_reranker(config, home), ExecutorChoice(device=device))
    return executor.scorer(ExecuteOptions())


def hybrid_candidates(
    index: "IndexProduct", queries: list[EvalQuery], embedder_for: EmbedderFor, depth: int
) -> list[list[dict]]:
    """Each query's top `depth` rows by hybrid search on the live index generation, as
    search takes them (the generation's table and its feeds' tables)."""
    live = index.live()
    tables = index.search_tables(live.index)
    if not tables:
        raise NoLiveGenerationError(f"the live table {live.index!r} is missing")
    model = index.model_for(live.record)
    vectors = embedder_for(model).embed([model.query_prefix + q.query for q in queries])
    return [
        ranked_rows(
            tables,
            q.query,
            vectors[n],
            HYBRID,
            depth,
            columns=CANDIDATE_COLUMNS,
            params=index.vector_params,
        )
        for n, q in enumerate(queries)
    ]


def documents_of(rows: list[dict]) -> list[str]:
    """The documents of ranked rows, in the order their best row ranks."""
    return list(dict.fromkeys(row["doc_id"] for row in rows))


class LiveIndexRule:
    """A reranker generation is complete while the index generation it reorders is live."""

    def __init__(self, index: "IndexProduct") -> None:
        self.index = index

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        reviewed_on = json.loads(record.model_config)["index_generation"]
        current = self.index.registry.live(self.index.name)
        key = {"index": current.index_name if current else None}
        if current is None or current.index_name != reviewed_on:
            now = current.index_name if current else "none"
            return Completeness(
                False, f"it reorders index generation {reviewed_on}, and {now} is live", key
            )
        return Completeness(True, None, key)


class RerankScorer:
    """MRR@10, nDCG@10 and recall@10 of the reranked candidates on the collection's
    evaluation set, over the live index generation; its baseline is hybrid search alone on
    the same candidates (see the module docstring)."""

    def __init__(self, generations: "RerankerGenerations", evaluation: EvaluationConfig) -> None:
        self.generations = generations
        self.evaluation = evaluation
        self.floors: dict[str, float] = {}
        self._candidates: tuple[str, list] | None = None  # (key, rows per query)

    @property
    def tolerance(self) -> float:
        return self.evaluation.tolerance

    def key(self, record: GenerationRecord) -> dict[str, object] | None:
        """What every reranker generation's scores depend on: the evaluation set and the
        live index generation's table (the candidates), whatever the record."""
        return self.live_key()

    def live_key(self) -> dict[str, object] | None:
        index = self.generations.index_product
        live = index.registry.live(index.name)
        if live is None:
            return None
        table = index.store.open(live.index_name)
        return {
            "eval_set": eval_set_version(self.evaluation.path),
            "index": live.index_name,
            "version": table.version if table is not None else None,
            "candidates": self.generations.candidates,
        }

    def candidates(self, embedder_for: EmbedderFor) -> tuple[list[EvalQuery], list[list[dict]]]:
        """Each evaluation query's hybrid candidates on the live index, as search takes them
        (computed once per review)."""
        queries = load_eval_set(self.evaluation.path)
        key = json.dumps(self.live_key(), sort_keys=True, default=str)
        if self._candidates is None or self._candidates[0] != key:
            index, depth = self.generations.index_product, self.generations.candidates
            self._candidates = (key, hybrid_candidates(index, queries, embedder_for, depth))
        return queries, self._candidates[1]

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        queries, candidates = self.candidates(embedder_for)
        config = RerankerConfig.model_validate(json.loads(record.model_config)["reranker"])
        scorer = self.generations.scorer_for(config)
        ranked = [
            documents_of(reranked(rows, q.query, scorer))
            for q, rows in zip(queries, candidates, strict=True)
        ]
        return ranking_scores(ranked, queries, CUT)

    def baseline(self, embedder_for: EmbedderFor) -> Baseline:
        queries, candidates = self.candidates(embedder_for)
        scores = ranking_scores([documents_of(rows) for rows in candidates], queries, CUT)
        return Baseline("hybrid search alone", scores, GATED)


class RerankerGenerations(ReviewedGenerations):
    """A collection's reranker generations (see the module docstring): no table of their
    own; a generation's record holds its configuration, the index generation it reorders
    and its review."""

    no_live_hint = "run the collection to review its reranker"

    def __init__(self, index: "IndexProduct", config: RerankerConfig) -> None:
        self.index_product = index
        self.reranker = config
        self.config = index.config
        self.tracking = index.tracking
        self.store = index.store
        self.home = index.storage.home
        self._scorers: dict[str, Scorer] = {}

    @property
    def name(self) -> str:
        return reranker_product_name(self.index_product.name)

    @property
    def candidates(self) -> int:
        return self.reranker.candidates

    def reviewed_on(self) -> str:
        """The index generation this configuration's reranker reorders: the live one."""
        return self.index_product.live().index

    @cached_property
    def identity(self) -> dict[str, object]:
        """What decides its scores: a cross-encoder's files and length, or the judge's chat
        model, prompt and document cut."""
        from batch_pipeline.executors.scoring import configured_reranker

        return configured_reranker(self.reranker, self.home).identity()

    def generation_config(self) -> dict:
        return {
            "reranker": self.reranker.model_dump(mode="json"),
            "identity": self.identity,
            "index_generation": self.reviewed_on(),
        }

    @property
    def fingerprint(self) -> str:
        what = {k: v for k, v in self.generation_config().items() if k != "reranker"}
        return fingerprint_of({**what, "candidates": self.candidates})

    def completeness_rule(self) -> LiveIndexRule:
        return LiveIndexRule(self.index_product)

    def scorer(self) -> RerankScorer:
        return RerankScorer(self, self.index_product.collection.evaluation)

    def drop_tables(self, index: str) -> None:
        """A reranker generation has no table."""

    def scorer_for(self, config: RerankerConfig) -> Scorer:
        """The engine of a reranker configuration, loaded once per product."""
        key = config.model_dump_json()
        if key not in self._scorers:
            self._scorers[key] = open_scorer(config, self.home)
        return self._scorers[key]

    def live_scorer(self) -> Scorer:
        """The live reranker's engine, for search; RerankRefusedError saying why not."""
        live = self.registry.live(self.name)
        index_live = self.index_product.registry.live(self.index_product.name)
        if live is None:
            record = self.configured_record(index_live)
            if record is None or record.decision is None:
                raise RerankRefusedError(
                    f"--rerank: {self.index_product.name}'s reranker has not been reviewed "
                    "yet; the collection's next run reviews it"
                )
            raise RerankRefusedError(
                f"--rerank: {self.index_product.name}'s reranker is not used: {record.decision}"
            )
        reviewed_on = json.loads(live.model_config)["index_generation"]
        if index_live is None or index_live.index_name != reviewed_on:
            raise RerankRefusedError(
                f"--rerank: {self.index_product.name}'s live reranker was reviewed on index "
                f"generation {reviewed_on}, which is no longer live; the collection's next run "
                "reviews it again"
            )
        try:
            config = RerankerConfig.model_validate(json.loads(live.model_config)["reranker"])
        except ValueError as error:  # its folder is gone since it was reviewed
            raise RerankRefusedError(
                f"--rerank: {self.index_product.name}'s live reranker cannot be loaded: "
                f"{' '.join(str(error).split())}"
            ) from None
        return self.scorer_for(config)

    def configured_record(self, index_live: GenerationRecord | None) -> GenerationRecord | None:
        """The configured reranker's record over the live index, if it was ever registered."""
        if index_live is None:
            return None
        return self.registry.get(self.name, self.fingerprint)
