"""The score family in the run's process: a reranker folder is resolved as the other models
are (one line naming the folder when it is not a one-label cross-encoder); the in-process
scorer returns one score per pair in the pairs' order, the same as sentence-transformers'
`CrossEncoder` scoring the pairs one call, however the token budget batches them, and counts
what it scored. The reranker is the TEST cross-encoder (all-MiniLM-L6-v2's encoder under an
untrained head: real architecture, meaningless scores)."""

import json

import numpy as np
import pytest

from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.inference.rerankers import (
    RerankerNotAvailableError,
    build_test_cross_encoder,
    resolve_reranker,
)
from batch_pipeline.inference.scorer import CrossEncoderScorer

QUERY = "how do I reset my password"
DOCUMENTS = [
    "Use the Forgot password link on the sign-in page.",
    "The desktop app crashes when the cache folder is full. " * 60,  # past 512 tokens
    "Invoices are sent on the first of each month.",
    "Single sign-on users reset their password with their identity provider.",
    "Relay supports the two latest versions of Chrome, Firefox, Safari and Edge.",
]


@pytest.fixture(scope="session")
def cross_encoder(tmp_path_factory, model):
    return build_test_cross_encoder(model.path, tmp_path_factory.mktemp("cross-encoder"))


def test_a_folder_that_is_no_cross_encoder_is_refused_in_one_line(tmp_path, model, cross_encoder):
    with pytest.raises(RerankerNotAvailableError, match="no config.json there"):
        resolve_reranker(tmp_path / "nowhere")
    with pytest.raises(RerankerNotAvailableError, match="BertModel is not a sequence classifier"):
        resolve_reranker(model.path)  # an embedding model: no classification head
    three = tmp_path / "three"
    three.mkdir()
    config = json.loads((cross_encoder / "config.json").read_text())
    config["id2label"] = {"0": "a", "1": "b", "2": "c"}
    (three / "config.json").write_text(json.dumps(config))
    with pytest.raises(RerankerNotAvailableError, match="it has 3 labels"):
        resolve_reranker(three)
    resolved = resolve_reranker(cross_encoder)
    assert resolved.max_length == 512 and len(resolved.fingerprint) == 64


def test_the_scores_are_cross_encoders_in_the_pairs_order_however_batched(cross_encoder):
    from sentence_transformers import CrossEncoder

    reranker = resolve_reranker(cross_encoder)
    pairs = [(QUERY, document) for document in DOCUMENTS] + [("invoices", DOCUMENTS[2])]
    expected = CrossEncoder(str(cross_encoder), device="cpu", max_length=512).predict(pairs)
    tight = CrossEncoderScorer(reranker, settings=PlanSettings(token_budget=64))
    found = tight.score(pairs)
    assert found.dtype == np.float32 and found.shape == (len(pairs),)
    assert np.allclose(found, expected, atol=1e-5)
    assert tight.stats.pairs == len(pairs) and tight.stats.batches >= 3  # the budget split it
    assert tight.stats.tokens <= tight.stats.padded_tokens
    loose = CrossEncoderScorer(reranker)
    assert np.allclose(loose.score(pairs), found, atol=1e-5) and loose.stats.batches == 1
    assert loose.score([]).shape == (0,)
