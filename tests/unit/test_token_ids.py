"""Token ids counted on several threads equal what the model's own tokenizer gives."""

import threading

import pytest

from batch_pipeline.inference.models import load_tokenizer
from batch_pipeline.inference.tokens import TokenIds

LIMIT = 32


@pytest.fixture(scope="module")
def tokenizer(model):
    return load_tokenizer(model.path)


SENTENCE = "the refund window is thirty days, and Überweisungen take 2-3 business days"


def texts(n: int) -> list[str]:
    """Texts of every length from a few tokens to well over the limit, not sorted."""
    words = SENTENCE.split(" ")
    return [" ".join(words[j % len(words)] for j in range((i * 7) % 90 + 1)) for i in range(n)]


def called(tokenizer, items: list[str], limit: int = LIMIT) -> list[list[int]]:
    return tokenizer(items, add_special_tokens=True, truncation=True, max_length=limit)["input_ids"]


def test_threads_give_the_tokenizer_s_ids_in_input_order(tokenizer, monkeypatch):
    items = texts(300)
    seen: set[str] = set()
    count = TokenIds(tokenizer, LIMIT, threads=3)
    encoded = count._encoded

    def recording(part):  # noqa: ANN001, ANN202
        seen.add(threading.current_thread().name)
        return encoded(part)

    monkeypatch.setattr(count, "_encoded", recording)
    ids = count(items)

    assert ids == called(tokenizer, items)
    assert max(map(len, ids)) == LIMIT  # cut at the limit, special tokens included
    assert len([name for name in seen if name.startswith("token-ids")]) > 1


@pytest.mark.parametrize("side", ["right", "left"])
def test_texts_over_the_limit_are_cut_on_the_tokenizer_s_side(tokenizer, side, monkeypatch):
    monkeypatch.setattr(tokenizer, "truncation_side", side)
    items = texts(200)
    count = TokenIds(tokenizer, LIMIT, threads=2)
    assert count(items) == called(tokenizer, items)
    assert count._trusted  # by its own copy, not by falling back to the tokenizer


def test_a_short_list_is_counted_on_the_calling_thread(tokenizer, monkeypatch):
    count = TokenIds(tokenizer, LIMIT, threads=4)
    monkeypatch.setattr(
        "batch_pipeline.inference.tokens.ThreadPoolExecutor",
        lambda *a, **k: pytest.fail("a pool for a short list"),
    )
    assert count(texts(20)) == called(tokenizer, texts(20))


class Prefixing:
    """FAKE: a tokenizer whose Python side changes the texts before its Rust backend sees
    them, as a model's own wrapper may; the backend alone would give other ids."""

    def __init__(self, tokenizer) -> None:  # noqa: ANN001
        self.inner = tokenizer
        self.backend_tokenizer = tokenizer.backend_tokenizer
        self.calls = 0

    def __call__(self, items, **settings):  # noqa: ANN001, ANN003, ANN204
        self.calls += 1
        return self.inner([f"query: {t}" for t in items], **settings)


def test_a_tokenizer_that_reads_texts_otherwise_is_called_as_it_is(tokenizer):
    wrapper = Prefixing(tokenizer)
    items = texts(200)
    count = TokenIds(wrapper, LIMIT, threads=2)

    assert count(items) == called(tokenizer, [f"query: {t}" for t in items])
    assert count(items[:5]) == called(tokenizer, [f"query: {t}" for t in items[:5]])
    assert wrapper.calls == 3  # the check, then every call as it is


def test_an_empty_list_does_not_stand_in_for_the_check(tokenizer):
    wrapper = Prefixing(tokenizer)
    count = TokenIds(wrapper, LIMIT, threads=2)
    assert count([]) == []
    assert count(texts(3)) == called(tokenizer, [f"query: {t}" for t in texts(3)])


def test_a_tokenizer_without_a_rust_backend_is_called_as_it_is(tokenizer):
    class Slow:
        """FAKE: a Python-only tokenizer (no backend_tokenizer)."""

        def __call__(self, items, **settings):  # noqa: ANN001, ANN003, ANN204
            return tokenizer(items, **settings)

    items = texts(150)
    assert TokenIds(Slow(), LIMIT, threads=2)(items) == called(tokenizer, items)
