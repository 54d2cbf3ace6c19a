"""One set of pairs, two engines: the TEST cross-encoder (all-MiniLM-L6-v2's encoder under an
untrained one-label head) scores the same (query, document) pairs in the run's process
(sentence-transformers' `CrossEncoder`) and on vLLM's engine in that process (`LLM.score`,
the folder as a pooling model), on this CPU: the same scores within 1e-3 and the same order,
a pair past the model's 512 tokens included."""

import numpy as np
import pytest

from batch_pipeline.inference.rerankers import build_test_cross_encoder, resolve_reranker
from batch_pipeline.inference.scorer import CrossEncoderScorer
from batch_pipeline.inference.vllm_scorer import VllmScorer
from tests.engine.test_scorers import DOCUMENTS, QUERY


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, model):
    return resolve_reranker(build_test_cross_encoder(model.path, tmp_path_factory.mktemp("ce")))


def test_in_process_and_vllm_give_the_same_scores_in_the_same_order(reranker):
    pairs = [(QUERY, document) for document in DOCUMENTS]
    pairs += [("invoices", document) for document in DOCUMENTS]
    local = CrossEncoderScorer(reranker).score(pairs)
    vllm = VllmScorer(reranker)
    on_vllm = vllm.score(pairs)
    assert np.abs(local - on_vllm).max() < 1e-3
    assert list(np.argsort(-local, kind="stable")) == list(np.argsort(-on_vllm, kind="stable"))
    assert vllm.stats.pairs == len(pairs) and vllm.load_seconds > 0
