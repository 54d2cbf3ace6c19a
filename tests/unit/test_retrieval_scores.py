"""The retrieval review's nDCG@k (binary relevance), against rankings worked by hand: one
relevant document first is 1; second, 1/log2(3); two relevant documents at the first and the
third rank of two, (1 + 1/2) / (1 + 1/log2(3)); none in the top k, 0."""

import math

import pytest

from batch_pipeline.generations.evaluation import ndcg


@pytest.mark.parametrize(
    ("hits", "relevant", "k", "expected"),
    [
        ([0], 1, 10, 1.0),
        ([1], 1, 10, 1 / math.log2(3)),
        ([0, 2], 2, 10, (1 + 1 / 2) / (1 + 1 / math.log2(3))),
        ([0, 1], 2, 10, 1.0),
        ([], 1, 10, 0.0),
        ([10], 1, 10, 0.0),  # ranked 11th: outside the top 10
        ([0], 3, 1, 1.0),  # three relevant, one slot: the best ranking fills it
    ],
)
def test_ndcg_matches_the_rankings_worked_by_hand(hits, relevant, k, expected):
    assert ndcg(hits, relevant, k) == pytest.approx(expected)
