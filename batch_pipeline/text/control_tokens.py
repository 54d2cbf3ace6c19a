"""A document's text made safe to place inside a chat prompt: the chat model's control tokens
(its tokenizer's special and added tokens, such as `<|im_start|>` and `<|im_end|>`), written
in a document, would otherwise become the model's real turn markers, so a page could open a
system turn of its own and dictate its brief. Each one found is broken by a WORD JOINER
(U+2060, invisible) after its first character: the text reads the same, and the tokenizer no
longer finds the token in it."""

from collections.abc import Iterable

JOINER = "\u2060"


def neutralised(text: str, control_tokens: Iterable[str]) -> tuple[str, int]:
    """`text` with every control token broken (see the module docstring), and how many were.
    Longer tokens first, so one containing another is broken whole."""
    found = 0
    for token in sorted({t for t in control_tokens if len(t) > 1}, key=len, reverse=True):
        count = text.count(token)
        if count:
            text = text.replace(token, token[0] + JOINER + token[1:])
            found += count
    return text, found
