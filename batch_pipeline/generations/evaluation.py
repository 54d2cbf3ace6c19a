"""The offline evaluation gate: recall@k, MRR@k and nDCG@k of a generation on a labelled query
set.

An evaluation set is a JSONL file, one query per line:
`{"query": "how do I reset my password", "relevant": ["account/reset-password.md"]}`.
A query's ranking is the order in which documents first appear among the rows ranked for it
(the generation's chunks and the rows of any companion table searched with them, such as the
briefs' questions), ranked as search ranks them in the collection's mode (`state.retrieval`).
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batch_pipeline.config import ModelConfig
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import ResolvedModel, resolve_model
from batch_pipeline.state.retrieval import DEFAULT_PARAMS, TEXT, VECTOR, VectorParams, ranked_rows
from batch_pipeline.state.tracking import GenerationRecord
from batch_pipeline.state.vector_store import VectorStore


def index_model(record: GenerationRecord) -> ResolvedModel:
    """The embedding model a vector index generation was built with (its record keeps the
    model's config): what scores it, and what embeds rows beside it."""
    return resolve_model(ModelConfig.model_validate_json(record.model_config))


@dataclass(frozen=True)
class EvalQuery:
    query: str
    relevant: frozenset[str]


class EvalSetError(ValueError):
    """An evaluation set that cannot be used; the message names the line."""


def eval_set_version(path: Path) -> str:
    """A labelled set's version: the hash of its file (any product's set)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def load_eval_set(path: Path) -> list[EvalQuery]:
    queries = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            queries.append(EvalQuery(str(item["query"]), frozenset(map(str, item["relevant"]))))
        except (ValueError, KeyError, TypeError) as error:
            raise EvalSetError(f"{path}:{number}: expected query and relevant ({error})") from None
    if not queries:
        raise EvalSetError(f"{path}: no queries")
    return queries


def rank_documents(
    tables: list,
    vector: np.ndarray | None,
    k: int,
    text: str = "",
    mode: str = VECTOR,
    params: VectorParams = DEFAULT_PARAMS,
) -> list[str]:
    """The `k` documents first ranked for the query among the rows of `tables` (one
    generation's table and any companion searched with it, rows of the same model), in the
    order their best row ranks (`state.retrieval.ranked_rows`)."""
    if not tables:
        return []
    rows = ranked_rows(tables, text, vector, mode, k * 8, columns=("doc_id",), params=params)
    ranked: list[str] = []
    for row in rows:
        if row["doc_id"] not in ranked:
            ranked.append(row["doc_id"])
    return ranked[:k]


def score_generation(
    store: VectorStore,
    index: str,
    runner: Embedder,
    queries: list[EvalQuery],
    k: int,
    query_prefix: str = "",
    also: tuple[str, ...] = (),
    mode: str = VECTOR,
    params: VectorParams = DEFAULT_PARAMS,
) -> dict[str, float]:
    """Recall@k, MRR@k and nDCG@k (binary relevance) of the generation's table (with its
    companions `also`), each query ranked as search ranks it in `mode` (`state.retrieval`)."""
    vectors = runner.embed([query_prefix + q.query for q in queries]) if mode != TEXT else None
    table = store.open(index)  # opened once for every query, with the companions
    tables = [] if table is None else [table, *filter(None, map(store.open, also))]
    ranked = [
        rank_documents(
            tables, vectors[n] if vectors is not None else None, k, q.query, mode, params
        )
        for n, q in enumerate(queries)
    ]
    return ranking_scores(ranked, queries, k)


def ranking_scores(ranked: list[list[str]], queries: list[EvalQuery], k: int) -> dict[str, float]:
    """Recall@k, MRR@k and nDCG@k (binary relevance) of each query's ranked documents."""
    recall, reciprocal, gains = [], [], []
    for documents, query in zip(ranked, queries, strict=True):
        top = documents[:k]
        hits = [i for i, doc in enumerate(top) if doc in query.relevant]
        recall.append(len(set(top) & query.relevant) / len(query.relevant))
        reciprocal.append(1.0 / (hits[0] + 1) if hits else 0.0)
        gains.append(ndcg(hits, len(query.relevant), k))
    return {
        f"recall_at_{k}": round(float(np.mean(recall)), 4),
        f"mrr_at_{k}": round(float(np.mean(reciprocal)), 4),
        f"ndcg_at_{k}": round(float(np.mean(gains)), 4),
        "queries": len(queries),
    }


def ndcg(hits: list[int], relevant: int, k: int) -> float:
    """nDCG@k with binary relevance: the discounted gain of the relevant documents at the
    0-based ranks `hits`, over the gain of the best ranking (`relevant` of them first)."""
    gain = sum(1.0 / np.log2(rank + 2) for rank in hits if rank < k)
    best = sum(1.0 / np.log2(rank + 2) for rank in range(min(relevant, k)))
    return float(gain / best) if best else 0.0


# Not scores to compare with live: how many were scored, what accuracy already weighs (the
# share answered, and accuracy on it, say how `unknown` spends it), and per-intent detail.
# scores reported beside the gated ones, never compared with live: counts, what `unknown` spends,
# per-intent figures, and calibration errors (lower is better, and the gate's are higher-better)
# what no candidate is compared with live on: counts, breakdowns, and what is lower the better
# (the share escalated and the cost of a cascade: less is no worse)
REPORTED_ONLY = frozenset(
    {
        "queries",
        "tickets",
        "documents",
        "coverage",
        "answered_accuracy",
        "per_intent",
        "confusions",
        "ece",
        "ece_uncalibrated",
        "cascade_escalated_share",
        "cascade_cost_per_1k",
    }
)
# a configured target, carried among a generation's scores, and the measured score it is a
# floor for: a target is never compared with live's (an operator may lower it on purpose)
TARGETS = {"cascade_target": "cascade_accuracy"}


@dataclass(frozen=True)
class GateDecision:
    """Whether a candidate may be promoted, why, and anything an operator should know."""

    allowed: bool
    reason: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Baseline:
    """Scores a candidate must beat whatever is live: what readers get without it (hybrid
    search alone, for a reranker)."""

    name: str  # how the gate's reason names it
    scores: dict[str, float]
    metrics: tuple[str, ...]  # the scores it must beat, each strictly


def gate(
    complete: bool,
    candidate: dict[str, float] | None,
    live: dict[str, float] | None,
    tolerance: float,
    floors: dict[str, float] | None = None,
    incomplete: str | None = None,
    baseline: Baseline | None = None,
) -> GateDecision:
    """Whether a candidate may be promoted: complete (`incomplete` says why not), every score
    in `floors` at least its floor and every measured score at least its configured target
    (`TARGETS`), every score `baseline` names above the baseline's, and no measured score
    worse than live by more than `tolerance`."""
    if not complete:
        return GateDecision(
            False, incomplete or "not complete: a full pass has not landed every document yet"
        )
    if candidate is None:
        return GateDecision(
            True,
            "complete; promoted on completeness alone",
            ("no evaluation set is configured, so no scores were compared",),
        )
    below = [
        f"{metric} {candidate[metric]:.4f} < min_{metric} {floor}"
        for metric, floor in (floors or {}).items()
        if metric in candidate and candidate[metric] < floor
    ] + [
        f"{measured} {candidate[measured]:.4f} < {target} {candidate[target]:.4f}"
        for target, measured in TARGETS.items()
        if target in candidate and measured in candidate and candidate[measured] < candidate[target]
    ]
    if below:
        return GateDecision(False, "below its floor: " + "; ".join(below))
    if baseline is not None:
        short = [
            f"{metric} {candidate[metric]:.4f} <= {baseline.scores[metric]:.4f}"
            for metric in baseline.metrics
            if candidate[metric] <= baseline.scores[metric]
        ]
        if short:
            return GateDecision(False, f"no better than {baseline.name}: " + "; ".join(short))
    better = ","
    if baseline is not None:
        figures = ", ".join(
            f"{m} {candidate[m]:.4f} > {baseline.scores[m]:.4f}" for m in baseline.metrics
        )
        better = f", better than {baseline.name} ({figures}),"
    if live is None:
        return GateDecision(
            True, f"complete{better} and there is no live generation to compare with"
        )
    worse = [
        f"{metric} {candidate[metric]:.4f} < live {live[metric]:.4f} - {tolerance}"
        for metric in candidate
        if metric not in REPORTED_ONLY
        and metric not in TARGETS
        and metric in live
        and candidate[metric] < live[metric] - tolerance
    ]
    if worse:
        return GateDecision(False, "worse than live: " + "; ".join(worse))
    return GateDecision(True, f"complete{better} and no worse than live within the tolerance")
