"""The briefs' review parts without a model: faithfulness (summaries nearer their own
document than any other), the labelled audiences, and the completeness rule."""

import numpy as np
import pytest

from batch_pipeline.briefs.review import (
    CoversCollectionRule,
    LabelledBriefsError,
    faithfulness,
    load_labelled_audiences,
)
from batch_pipeline.state.tracking import GenerationRecord

DOCS = ["a.md", "b.md", "c.md"]
VECTORS = np.eye(3, dtype=np.float32)  # three orthogonal documents


def embed_as(table):
    return lambda texts: np.array([table[t] for t in texts], dtype=np.float32)


def test_faithfulness_is_the_share_of_summaries_nearest_their_own_document():
    near_own = {"sa": [0.9, 0.1, 0.0], "sb": [0.1, 0.8, 0.0], "sc": [0.0, 0.2, 0.7]}
    summaries = {"a.md": "sa", "b.md": "sb", "c.md": "sc"}
    assert faithfulness(summaries, DOCS, VECTORS, embed_as(near_own)) == 1.0
    swapped = {**near_own, "sc": [0.9, 0.0, 0.1]}  # c's summary is nearer a than c
    assert faithfulness(summaries, DOCS, VECTORS, embed_as(swapped)) == pytest.approx(2 / 3)
    assert faithfulness({"a.md": "sa"}, DOCS, VECTORS, embed_as(near_own)) is None


def test_the_faithfulness_sample_is_fixed_and_bounded():
    from batch_pipeline.briefs.review import _sampled

    ids = [f"doc-{n}.md" for n in range(50)]
    assert _sampled(ids, 10) == _sampled(reversed(ids), 10) and len(_sampled(ids, 10)) == 10
    assert _sampled(ids[:3], 10) == set(ids[:3])


def test_labelled_audiences_are_checked_against_the_schema_s_values(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"doc_id": "a.md", "audience": "admin"}\n\n')
    assert load_labelled_audiences(path, ["admin", "member"]) == {"a.md": "admin"}
    path.write_text('{"doc_id": "a.md", "audience": "robot"}\n')
    with pytest.raises(LabelledBriefsError, match="line 1: audience 'robot' is not one of"):
        load_labelled_audiences(path, ["admin", "member"])
    path.write_text('{"doc": "a.md"}\n')
    with pytest.raises(LabelledBriefsError, match="line 1: not a"):
        load_labelled_audiences(path, None)


def record(rows, documents, full_pass=True):
    return GenerationRecord(
        product="kb_briefs",
        fingerprint="f",
        index_name="kb_briefs__f",
        state="building",
        model_config="{}",
        full_pass=full_pass,
        full_passes=None,
        documents=documents,
        rows=rows,
        complete=False,
        scores=None,
        decision=None,
        created_at=0.0,
        updated_at=0.0,
        promoted_at=None,
        retired_at=None,
    )


def test_a_generation_is_complete_when_it_briefs_every_document_of_its_full_pass():
    rule = CoversCollectionRule()
    assert rule.assess(record(100, 100), None).complete
    short = rule.assess(record(98, 100), None)
    assert not short.complete and "2 of 100 documents have no valid brief" in short.reason
    assert "no full pass" in rule.assess(record(0, 0, full_pass=False), None).reason
