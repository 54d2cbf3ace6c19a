"""Cutting parsed documents into model inputs with the model's own tokenizer.

Chunks never cross a section boundary, and a chunk's id is derived from the document id, its
section's heading path (and that path's occurrence) and its position within the section. So an
edit in one section changes the ids and hashes of that section's chunks only.

Each chunk carries the exact text it feeds the model: the document prefix, title and heading
path, then the chunk text. Its hash is the first half of the staleness key.
"""

import hashlib
from collections import Counter
from dataclasses import dataclass

from batch_pipeline.text.normalize import ParsedDocument

SPECIAL_TOKENS = 2  # [CLS] ... [SEP] for BERT-style encoders
BOUNDARY_MARGIN = 2  # re-tokenising a cut can merge sub-words differently at its edges
HEADER_SHARE = 4  # the title and heading path take at most 1/4 of a chunk's tokens

# Break priorities between two tokens: higher is a better place to cut.
_PARAGRAPH, _SENTENCE, _LINE, _WORD, _NONE = 4, 3, 2, 1, 0


@dataclass(frozen=True)
class ChunkSettings:
    max_tokens: int
    overlap_tokens: int
    include_title: bool = True
    include_headings: bool = True
    document_prefix: str = ""


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    chunk_index: int
    section: str
    text: str
    input_text: str
    input_hash: str
    token_count: int
    # the input's token ids as the model's tokenizer gives them (special tokens included,
    # not cut to any limit): execute pads these instead of tokenising the input again
    input_ids: list[int]


def hash_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _section_key(headings: tuple[str, ...], occurrence: int) -> str:
    blob = "\x1f".join(headings) + f"\x1e{occurrence}"
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()[:10]


def section_path(title: str, headings: tuple[str, ...]) -> str:
    """The heading path under the title, e.g. `Steps > On mobile` (the H1 title left out)."""
    return " > ".join(headings[1:] if headings and headings[0] == title else headings)


def _header(tokenizer, title: str, headings: tuple[str, ...], settings: ChunkSettings) -> str:
    """The document prefix, then the title and heading path, cut to at most
    `max_tokens // HEADER_SHARE` tokens so that every chunk keeps room for its text."""
    parts = []
    if settings.include_title and title:
        parts.append(title)
    if settings.include_headings:
        path = section_path(title, headings)
        if path:
            parts.append(path)
    header = truncate_to_tokens(tokenizer, "\n".join(parts), settings.max_tokens // HEADER_SHARE)
    return settings.document_prefix + (header + "\n\n" if header else "")


def truncate_to_tokens(tokenizer, text: str, max_tokens: int) -> str:
    """`text` cut at a token boundary to at most `max_tokens` tokens."""
    if not text:
        return text
    offsets = _encode(tokenizer, text, offsets=True)["offset_mapping"]
    if len(offsets) <= max_tokens:
        return text
    return text[: offsets[max_tokens - 1][1]].rstrip()


def _encode(tokenizer, text, special: bool = False, offsets: bool = False) -> dict:
    """Tokenise without the "sequence length is longer than" warning: chunking measures
    lengths on purpose, before anything is cut to the model's limit."""
    return tokenizer(
        text, add_special_tokens=special, return_offsets_mapping=offsets, verbose=False
    )


def _break_priority(text: str, end: int, next_start: int) -> int:
    gap = text[end:next_start]
    if "\n\n" in gap:
        return _PARAGRAPH
    if gap and not gap.strip():
        if text[end - 1 : end] in ".!?:;" and end > 0:
            return _SENTENCE
        return _LINE if "\n" in gap else _WORD
    return _NONE


def split_by_tokens(text: str, offsets: list[tuple[int, int]], budget: int, overlap: int):
    """Yield (start_char, end_char) windows of at most `budget` tokens.

    Cuts prefer a paragraph break, then a sentence end, a line end, a space, and only then any
    token boundary, looking back as far as half a window. Consecutive windows share about
    `overlap` tokens, starting on a word boundary.
    """
    n = len(offsets)
    start = 0
    while start < n:
        limit = min(n, start + budget)
        end = limit
        if limit < n:
            best, best_priority = limit, -1
            floor = start + max(1, budget // 2)
            for i in range(limit - 1, floor - 1, -1):
                priority = _break_priority(text, offsets[i][1], offsets[i + 1][0])
                if priority > best_priority:
                    best, best_priority = i + 1, priority
                    if priority == _PARAGRAPH:
                        break
            end = best
        yield offsets[start][0], offsets[end - 1][1]
        if end >= n:
            return
        next_start = max(end - overlap, start + 1)
        while (
            next_start < end
            and _break_priority(text, offsets[next_start - 1][1], offsets[next_start][0]) == _NONE
        ):
            next_start += 1
        start = next_start


def model_token_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    """Each model input's token ids, special tokens included, not cut to any limit: what
    prepare counts and keeps, and execute pads (it cuts what is over the model's limit)."""
    return _encode(tokenizer, texts, special=True)["input_ids"]


def count_tokens(tokenizer, text: str) -> int:
    """Tokens of `text`, special tokens not counted."""
    return len(_encode(tokenizer, text)["input_ids"]) if text else 0


def chunk_document(
    doc_id: str, parsed: ParsedDocument, tokenizer, settings: ChunkSettings
) -> list[Chunk]:
    """All chunks of one document, in order, with stable ids and their exact model inputs."""
    pending: list[tuple[str, str, str, str]] = []  # chunk_id, section, text, input_text
    occurrences: Counter[tuple[str, ...]] = Counter()
    for section in parsed.sections:
        occurrence = occurrences[section.headings]
        occurrences[section.headings] += 1
        key = _section_key(section.headings, occurrence)
        header = _header(tokenizer, parsed.title, section.headings, settings)
        budget = (
            settings.max_tokens - SPECIAL_TOKENS - BOUNDARY_MARGIN - count_tokens(tokenizer, header)
        )
        offsets = _encode(tokenizer, section.text, offsets=True)["offset_mapping"]
        if not offsets:
            continue
        windows = (
            [(0, len(section.text))]
            if len(offsets) <= budget
            else split_by_tokens(section.text, offsets, budget, settings.overlap_tokens)
        )
        label = section_path(parsed.title, section.headings)
        for n, (start, end) in enumerate(windows):
            text = section.text[start:end].strip()
            if text:
                pending.append((f"{doc_id}#{key}:{n}", label, text, header + text))
    if not pending:
        return []
    token_ids = model_token_ids(tokenizer, [p[3] for p in pending])
    return [
        Chunk(
            chunk_id=chunk_id,
            chunk_index=index,
            section=section,
            text=text,
            input_text=input_text,
            input_hash=hash_text(input_text),
            token_count=min(len(ids), settings.max_tokens),
            input_ids=ids,
        )
        for index, ((chunk_id, section, text, input_text), ids) in enumerate(
            zip(pending, token_ids, strict=True)
        )
    ]
