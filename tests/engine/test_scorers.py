"""The score family in the run's process: a reranker folder is resolved as the other models
are (one line naming the folder when it is not a one-label cross-encoder); the in-process
scorer returns one score per pair in the pairs' order, the same as sentence-transformers'
`CrossEncoder` scoring the pairs one call, however the token budget batches them, and counts
what it scored. The reranker is the TEST cross-encoder (all-MiniLM-L6-v2's encoder under an
untrained head: real architecture, meaningless scores)."""

import json

import numpy as np
import pyarrow as pa
import pytest

from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.inference.cross_encoder import CrossEncoderScorer
from batch_pipeline.inference.rerankers import (
    RerankerNotAvailableError,
    build_test_cross_encoder,
    resolve_reranker,
)

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


def test_a_folder_whose_weights_hold_no_classifier_head_is_refused_at_load(
    tmp_path, model, cross_encoder
):
    """An encoder's checkpoint under a config edited to say `BertForSequenceClassification`
    with one label (or an incomplete download) would score with a fresh random head in each
    process: refused at load, naming `reranker.model` and the missing weights (round six,
    defect 2)."""
    import shutil

    from batch_pipeline.config import ConfigError, load_config

    headless = tmp_path / "headless"
    shutil.copytree(model.path, headless)
    config = json.loads((headless / "config.json").read_text())
    config |= {"architectures": ["BertForSequenceClassification"], "num_labels": 1}
    (headless / "config.json").write_text(json.dumps(config))
    with pytest.raises(RerankerNotAvailableError, match="its weights hold no classifier head"):
        resolve_reranker(headless)
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    shutil.copy(cross_encoder / "config.json", no_weights / "config.json")
    with pytest.raises(RerankerNotAvailableError, match="no weights there"):
        resolve_reranker(no_weights)
    (tmp_path / "docs").mkdir()
    (tmp_path / "eval.jsonl").write_text('{"query": "q", "relevant": ["a.md"]}\n')
    (tmp_path / "pipeline.yaml").write_text(
        "collections:\n"
        "  - name: handbook\n"
        "    source: {kind: filesystem, path: docs}\n"
        "    evaluation: {path: eval.jsonl}\n"
        f"    reranker: {{model: {headless}}}\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_config(tmp_path / "pipeline.yaml")
    assert "collections[0].reranker.model" in str(refused.value)
    assert "no classifier head" in str(refused.value)
    assert resolve_reranker(cross_encoder).max_length == 512  # a trained head's folder loads


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


def write_pairs(path, pairs: list[tuple[str, str, str]]) -> None:  # noqa: ANN001
    from batch_pipeline.stages.score import PAIRS_SCHEMA
    from batch_pipeline.state.staging import StageWriter

    with StageWriter(path, PAIRS_SCHEMA) as out:
        out.write_table(
            pa.table(
                {name: [p[i] for p in pairs] for i, name in enumerate(PAIRS_SCHEMA.names)},
                schema=PAIRS_SCHEMA,
            )
        )


def test_the_score_executor_plans_once_and_scores_what_no_checkpoint_holds(cross_encoder, tmp_path):
    """The `local` score executor from the registry: identical pairs planned once, packed
    under the budget; execute writes the cross-encoder's scores by pair, checkpointed; a rerun
    of the plan resumes every pair and loads no model."""
    from batch_pipeline.executors import ExecuteOptions, ExecutorChoice
    from batch_pipeline.executors.scoring import score_executor
    from batch_pipeline.state.staging import read_table

    reranker = resolve_reranker(cross_encoder)
    pairs = [(f"h{i}", QUERY, document) for i, document in enumerate(DOCUMENTS)]
    write_pairs(tmp_path / "pairs.parquet", [*pairs, pairs[0]])  # one pair twice
    executor = score_executor(reranker, ExecutorChoice(name="local"))
    options = ExecuteOptions(plan=PlanSettings(token_budget=256))
    plan = executor.plan(tmp_path / "pairs.parquet", tmp_path / "plan.parquet", options)
    assert (plan.pairs, plan.duplicates_folded) == (len(pairs), 1)
    assert plan.batches == 2  # the long pair alone: past the budget by itself
    checkpoints = tmp_path / "checkpoints"
    first = executor.execute(
        tmp_path / "plan.parquet", tmp_path / "scores.parquet", None, checkpoints, options
    )
    scores = read_table(tmp_path / "scores.parquet", ["input_hash", "score"]).to_pydict()
    found = dict(zip(scores["input_hash"], scores["score"], strict=True))
    expected = CrossEncoderScorer(reranker).score([(q, d) for _, q, d in pairs])
    assert np.allclose([found[h] for h, _, _ in pairs], expected, atol=1e-5)
    assert first.stats.pairs == len(pairs) and first.backend == "sentence-transformers"
    again = executor.execute(
        tmp_path / "plan.parquet", tmp_path / "again.parquet", None, checkpoints, options
    )
    assert again.stats.pairs == 0 and again.resumed_inputs == len(pairs)
    assert again.backend == "none"  # nothing to score: no model loaded
    with pytest.raises(Exception, match="float16"):
        score_executor(reranker, ExecutorChoice(name="local", dtype="float16"))
