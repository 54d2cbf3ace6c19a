"""Chunking documents in worker processes: the prepare stage's (and the benchmark's) pool.

`ChunkPool` chunks batches of documents in this process, or in a pool of spawned worker
processes (spawned, not forked: the parent may hold torch's threads), each of which loads the
tokenizer once. Results come back in submission order, so the output is the same (same
chunks, same order) with any number of workers, and at most `2 x workers` batches are in
flight, so memory stays bounded however large the corpus. No pyarrow: the GPU check uses it.
"""

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any

from batch_pipeline.text.chunking import ChunkSettings, chunk_document
from batch_pipeline.text.normalize import parse_document


def _chunk(doc: dict, tokenizer: Any, settings: ChunkSettings) -> tuple[str | None, list, dict]:
    """One document's title, chunks and front matter; raises ValueError when no text is
    left."""
    parsed = parse_document(doc["text"], doc["doc_id"], doc["format"])
    parsed.title = doc["title"] or parsed.title
    chunks = chunk_document(doc["doc_id"], parsed, tokenizer, settings)
    if not chunks:
        raise ValueError("the document has no text left after normalisation")
    return parsed.title, chunks, parsed.metadata


def _chunk_all(docs: list[dict], tokenizer: Any, settings: ChunkSettings) -> list[tuple]:
    """Each document's (title, chunks as tuples of `Chunk`'s fields, front matter), or (None,
    None, reason, error class, message). Plain tuples: they cross from a worker process
    cheaply."""
    results: list[tuple] = []
    for doc in docs:
        try:
            title, chunks, front_matter = _chunk(doc, tokenizer, settings)
            # shallow: `astuple` would copy each chunk's token ids element by element
            rows = [tuple(getattr(chunk, f.name) for f in fields(chunk)) for chunk in chunks]
            results.append((title, rows, front_matter))
        except Exception as error:  # noqa: BLE001 - recorded per document, run goes on
            reason = "no_text" if isinstance(error, ValueError) else "chunking_failed"
            results.append((None, None, reason, type(error).__name__, str(error)))
    return results


# A worker process's tokenizer and settings, set once by `_start_worker`.
_WORKER: dict[str, Any] = {}


def _start_worker(load_tokenizer: Callable[[], Any], settings: ChunkSettings) -> None:
    _WORKER["tokenizer"] = load_tokenizer()
    _WORKER["settings"] = settings


def _chunk_in_worker(docs: list[dict]) -> list[tuple]:
    return _chunk_all(docs, _WORKER["tokenizer"], _WORKER["settings"])


class ChunkPool:
    """Chunks batches of documents (dicts with doc_id, text, format and title) in this
    process (`workers` 1) or in `workers` processes; see the module docstring."""

    def __init__(self, get_tokenizer: Callable[[], Any], settings: ChunkSettings, workers: int):
        self.get_tokenizer = get_tokenizer
        self.settings = settings
        self.workers = workers
        self.pool = None
        self.tokenizer = None
        self.pending: deque = deque()

    def __enter__(self) -> "ChunkPool":
        if self.workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self.get_tokenizer, self.settings),
            )
        else:  # outside the per-document guard: a load failure stops the run
            self.tokenizer = self.get_tokenizer()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def submit(self, item: Any, docs: list[dict]) -> Iterator[tuple[Any, list[dict], list]]:
        """Queue a batch; yield the batches that are done, oldest first."""
        if self.pool is None:
            yield item, docs, _chunk_all(docs, self.tokenizer, self.settings)
            return
        self.pending.append((item, docs, self.pool.submit(_chunk_in_worker, docs)))
        while len(self.pending) > 2 * self.workers:
            yield self._next()

    def drain(self) -> Iterator[tuple[Any, list[dict], list]]:
        while self.pending:
            yield self._next()

    def _next(self) -> tuple[Any, list[dict], list]:
        item, docs, future = self.pending.popleft()
        return item, docs, future.result()
