"""Cutting long id lists into bounded batches: one helper for every `IN (...)` loop."""

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

ID_BATCH = 500  # ids per `IN (...)` filter or lookup: small SQL statements, bounded memory


def batched(items: Iterable[T], size: int = ID_BATCH) -> Iterator[list[T]]:
    """Lists of at most `size` items, in order (the last may be shorter); none if empty."""
    if size < 1:
        raise ValueError("batch size must be positive")
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
