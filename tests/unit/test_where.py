"""`search --where`: each literal is checked against its field's type before the table sees
it, and the message names the field and its type."""

import pytest

from batch_pipeline.index.search import WhereError, where_filter

FIELDS = {"priority": "int", "score": "float", "public": "bool", "product": "string"}


def test_literals_of_the_right_type_are_rebuilt():
    text = "chunk_index = 2 AND score >= 0.5 AND public = true AND product = 'it''s'"
    condition, named = where_filter(text, FIELDS)
    assert condition == "chunk_index = 2 AND score >= 0.5 AND public = TRUE AND product = 'it''s'"
    assert named == {"chunk_index", "score", "public", "product"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("chunk_index = 1.5", "chunk_index is int; '1.5' is not an int literal"),
        ("priority = 99999999999999999999", "priority is int; '99999999999999999999' is not an"),
        ("product = 1", "product is string; '1' is not a string literal"),
        ("public = 1", "public is bool; '1' is not a bool literal"),
    ],
)
def test_a_literal_of_the_wrong_type_names_the_field_and_its_type(text, message):
    with pytest.raises(WhereError, match=message):
        where_filter(text, FIELDS)
