"""The one interface every document source implements."""

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass


class SourceUnavailableError(RuntimeError):
    """The source as a whole cannot be read (missing folder, unreachable bucket or database)."""


class DocumentReadError(RuntimeError):
    """One document could not be read; recorded against that document, the run goes on."""


@dataclass(frozen=True)
class SourceEntry:
    """A document as listed by its source, before its content is read."""

    doc_id: str
    version: str  # changes whenever the content may have changed: mtime+size, ETag, updated-at
    size: int | None = None


class DocumentSource(ABC):
    """Lists documents cheaply and reads one document's bytes on demand."""

    @abstractmethod
    def describe(self) -> str:
        """A human-readable location, with no secrets in it."""

    @abstractmethod
    def list_entries(self) -> Iterator[SourceEntry]:
        """Every document currently in the source. Raises `SourceUnavailableError`."""

    @abstractmethod
    def read(self, doc_id: str) -> bytes:
        """One document's bytes. Raises `DocumentReadError` if it cannot be read."""

    def entries_for(self, doc_ids: list[str]) -> Iterator[SourceEntry]:
        """Entries for just these ids (those that still exist); sources may do this cheaper."""
        wanted = set(doc_ids)
        return (entry for entry in self.list_entries() if entry.doc_id in wanted)
