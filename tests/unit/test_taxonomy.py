"""The taxonomy loader refuses what would hang it or silently change it: YAML aliases (an
alias bomb), the same intent twice, a description that is not text, and a huge file."""

import pytest

from batch_pipeline.config.taxonomy import (
    MAX_TAXONOMY_BYTES,
    TaxonomyError,
    load_taxonomy,
    parse_taxonomy,
)

GOOD = """intents:
  refund_request:
    description: The customer asks for their money back.
    examples: ["Can I get a refund?"]
  duplicate_charge:
    description: The customer was charged twice.
"""


def test_a_good_taxonomy_loads_in_order():
    taxonomy = parse_taxonomy(GOOD)
    assert taxonomy.names == ["refund_request", "duplicate_charge"]
    assert taxonomy.intents[0].examples == ("Can I get a refund?",)


def test_an_alias_bomb_is_refused_before_it_expands():
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for n in range(1, 9):  # 9**9 strings once expanded
        levels.append(f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]")
    bomb = "\n".join(levels) + "\nintents:\n  x: {description: *a8}\n  y: {description: ok}\n"
    # refused at the first alias it reads (line 2), before anything is expanded
    with pytest.raises(TaxonomyError, match=r"line 2: YAML aliases \(\*a0\) are not accepted"):
        parse_taxonomy(bomb, "bomb.yaml")


def test_an_intent_named_twice_is_refused_naming_it_and_both_lines():
    text = GOOD + "  refund_request:\n    description: Again.\n"
    with pytest.raises(TaxonomyError, match=r"'refund_request' appears twice, on lines 2 and 7"):
        parse_taxonomy(text, "t.yaml")


def test_a_description_that_is_not_text_is_refused():
    text = GOOD.replace("The customer was charged twice.", "[not, text]")
    with pytest.raises(TaxonomyError, match=r"intents\.duplicate_charge: needs a description"):
        parse_taxonomy(text)


def test_a_file_over_the_bound_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(GOOD + "#" * MAX_TAXONOMY_BYTES)
    with pytest.raises(TaxonomyError, match="over 4 MiB; not a taxonomy"):
        load_taxonomy(path)


def test_a_taxonomy_nested_too_deeply_is_one_line():
    from batch_pipeline.config.taxonomy import TaxonomyError, parse_taxonomy

    with pytest.raises(TaxonomyError, match="taxonomy: nested too deeply to read as YAML"):
        parse_taxonomy("intents: " + "[" * 20000 + "]" * 20000)
