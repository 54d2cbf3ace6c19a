"""Normalisation of each format, and chunking with the model's own tokenizer."""

import pytest

from batch_pipeline.inference.models import load_tokenizer
from batch_pipeline.text.chunking import ChunkSettings, chunk_document
from batch_pipeline.text.normalize import parse_document


@pytest.fixture(scope="module")
def tokenizer(model):
    return load_tokenizer(model.path)


def test_markdown_is_cleaned_and_sectioned():
    doc = parse_document(
        "---\ntitle: From front matter\n---\n# Heading one\n\nSee [the docs](http://x) and "
        "**bold** `code`.\n\n## Sub\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\nkeep = 1\n```\n",
        "x.md",
    )
    assert doc.title == "From front matter"
    assert [s.headings for s in doc.sections] == [("Heading one",), ("Heading one", "Sub")]
    assert doc.sections[0].text == "See the docs and bold code."
    assert "a | b" in doc.sections[1].text and "keep = 1" in doc.sections[1].text
    assert "---" not in doc.sections[1].text


def test_restructuredtext_headings_and_markup():
    doc = parse_document(
        "=====\nGuide\n=====\n\nIntro with ``literal`` and `a link <http://x>`_.\n\n"
        "Install\n-------\n\n.. image:: pic.png\n   :alt: x\n\nRun the installer.\n",
        "guide.rst",
    )
    assert doc.title == "Guide"
    assert [s.headings for s in doc.sections] == [("Guide",), ("Guide", "Install")]
    assert doc.sections[0].text == "Intro with literal and a link."
    assert doc.sections[1].text == "Run the installer."


def test_html_drops_scripts_and_keeps_structure():
    doc = parse_document(
        "<html><head><title>Page</title><style>p{}</style></head><body><h1>Top</h1>"
        "<p>First &amp; <b>second</b>.</p><script>alert(1)</script><h2>Next</h2>"
        "<ul><li>one</li><li>two</li></ul></body></html>",
        "page.html",
    )
    assert doc.title == "Page"
    assert doc.sections[0].headings == ("Top",)
    assert doc.sections[0].text == "First & second."
    assert "alert" not in " ".join(s.text for s in doc.sections)
    assert doc.sections[1].headings == ("Top", "Next")


def test_deeply_nested_html_does_not_recurse():
    html = "<div>" * 5000 + "deep text" + "</div>" * 5000
    assert parse_document(html, "deep.html").sections[0].text == "deep text"


def test_plain_text_title_falls_back_to_the_file_name():
    doc = parse_document("one\n\n\n\ntwo   words", "notes/office-hours.txt")
    assert doc.title == "Office hours"
    assert doc.sections[0].text == "one\n\ntwo words"


def test_chunks_respect_max_tokens_and_overlap(tokenizer):
    sentence = "The quick brown fox jumps over the lazy dog near the river bank. "
    doc = parse_document("# Long\n\n## Body\n\n" + sentence * 200, "long.md")
    settings = ChunkSettings(max_tokens=64, overlap_tokens=8)
    chunks = chunk_document("long.md", doc, tokenizer, settings)
    assert len(chunks) > 10
    for chunk in chunks:
        assert chunk.token_count <= 64
        ids = tokenizer(chunk.input_text, add_special_tokens=True)["input_ids"]
        assert len(ids) <= 64
        assert chunk.input_text.startswith("Long\nBody\n\n")
    # consecutive windows overlap
    assert chunks[1].text.split()[0] in chunks[0].text


def test_chunks_prefer_paragraph_boundaries(tokenizer):
    paragraphs = [f"Paragraph {i} " + "has several words in it. " * 6 for i in range(12)]
    doc = parse_document("\n\n".join(paragraphs), "p.txt")
    chunks = chunk_document("p.txt", doc, tokenizer, ChunkSettings(128, 0))
    assert all(c.text.startswith("Paragraph") for c in chunks)
    assert all(c.text.endswith("in it.") for c in chunks)


def test_an_edit_in_one_section_keeps_other_chunk_ids_and_hashes(tokenizer):
    base = (
        "# Guide\n\n## Alpha\n\nAlpha text.\n\n## Beta\n\nBeta text.\n\n## Gamma\n\nGamma text.\n"
    )
    edited = base.replace("Beta text.", "Beta text, now longer. " * 80)
    added = base.replace("## Gamma", "## New section\n\nNew.\n\n## Gamma")
    settings = ChunkSettings(64, 8)
    before = {
        c.chunk_id: c
        for c in chunk_document("g.md", parse_document(base, "g.md"), tokenizer, settings)
    }
    for variant in (edited, added):
        after = {
            c.chunk_id: c
            for c in chunk_document("g.md", parse_document(variant, "g.md"), tokenizer, settings)
        }
        for chunk_id, chunk in before.items():
            if "Beta" in chunk.text and variant is edited:
                continue
            assert chunk_id in after
            assert after[chunk_id].input_hash == chunk.input_hash


def test_title_and_headings_are_part_of_the_model_input(tokenizer):
    doc = parse_document("# Refunds\n\n## How to ask\n\nWrite to us.", "r.md")
    (chunk,) = chunk_document("r.md", doc, tokenizer, ChunkSettings(256, 16))
    assert chunk.input_text == "Refunds\nHow to ask\n\nWrite to us."
    assert chunk.section == "How to ask"
    bare = chunk_document(
        "r.md", doc, tokenizer, ChunkSettings(256, 16, include_title=False, include_headings=False)
    )[0]
    assert bare.input_text == "Write to us."
    assert bare.input_hash != chunk.input_hash


def _page(title: str) -> str:
    body = "\n\n".join(
        f"## Part {n}\n\n" + " ".join(f"Sentence {n}.{i} explains a step." for i in range(25))
        for n in range(3)
    )
    return f"# {title}\n\n{body}\n"


@pytest.mark.parametrize("title_words", [115, 145, 400])  # ~230, ~290 and ~800 tokens
def test_a_long_title_keeps_room_for_text_in_every_chunk(tokenizer, title_words, capfd):
    settings = ChunkSettings(max_tokens=256, overlap_tokens=32)
    page = parse_document(_page("Short title"), "a.md")
    short = chunk_document("a.md", page, tokenizer, settings)
    title = " ".join(f"word{i}" for i in range(title_words))
    long = chunk_document("a.md", parse_document(_page(title), "a.md"), tokenizer, settings)

    assert len(long) <= len(short) + 3  # was 90 chunks instead of 5, or an IndexError
    for chunk in long:
        assert len(tokenizer(chunk.input_text)["input_ids"]) <= settings.max_tokens
        header = chunk.input_text.removesuffix(chunk.text)
        assert len(tokenizer(header, add_special_tokens=False)["input_ids"]) <= 256 // 4
        assert chunk.text.strip()
    assert "Token indices sequence length" not in capfd.readouterr().err
