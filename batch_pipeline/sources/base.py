"""The one interface every document source implements: folder, S3 bucket, SQL table."""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# The part of Dagster's 60 s sensor tick one look at a source may spend on work that grows with
# the source (hashing a folder's moved files, listing a bucket for a reset); past it, a look
# leaves the rest to a later look or to a run, so the tick ends well inside its limit.
LOOK_SECONDS = 20.0


class SourceUnavailableError(RuntimeError):
    """The source as a whole cannot be read (missing folder, unreachable bucket or database).

    `transient` says whether trying again may help (an unreachable server, a throttled
    service: `batch_pipeline.transient`), or not (a missing table, a misnamed column)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class DocumentReadError(RuntimeError):
    """One document could not be read; recorded against that document, the run goes on.

    `transient` says the failure says nothing about the document (a connection error, a
    timeout, a 5xx): it is retried on every run and never counts towards quarantine."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class ListingGap:
    """Part of a source its last listing could not see: a folder that could not be opened
    (`prefix` ends with "/"), one document that could not be looked at (`prefix` is its id),
    or a file it cannot name (`bad_name`, `prefix` its name escaped). Its documents are
    unknown, not deleted: they keep their rows."""

    prefix: str
    reason: str
    # the name itself is the problem (not UTF-8, longer than the system allows): a failure
    # in the document's own name, which no retry mends, rather than an unseen folder
    bad_name: bool = False

    def covers(self, doc_id: str) -> bool:
        folder = self.prefix.endswith("/")
        return doc_id == self.prefix or (folder and doc_id.startswith(self.prefix))


@dataclass(frozen=True)
class SourceEntry:
    """A document as listed by its source, before its content is read."""

    doc_id: str
    version: str  # changes whenever the content may have changed: mtime+size, ETag, updated-at
    size: int | None = None
    changed_at: float | None = None  # when the source says it last changed (epoch seconds)


@dataclass(frozen=True)
class RawDocument:
    """A document's bytes, with the title and format where the source knows them."""

    data: bytes
    title: str | None = None
    fmt: str | None = None
    metadata: dict = field(default_factory=dict)  # S3 object metadata, SQL metadata columns
    # the version of the bytes read, where the source tells it with them (an S3 object's ETag
    # as it was read): an object replaced between listing and reading lands under its own
    version: str | None = None


@dataclass
class ChangeSet:
    """What changed since a sensor's last look, and the state to remember for next time."""

    changed: list[SourceEntry] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    state: dict = field(default_factory=dict)
    # a change feed's messages: those carrying each document's change, to acknowledge once
    # its run request is in a committed cursor, and those carrying nothing wanted
    receipts: dict[str, list[str]] = field(default_factory=dict)
    ignorable: list[str] = field(default_factory=list)


class DocumentSource(ABC):
    """Lists documents cheaply and reads one document's bytes on demand."""

    kind: str = "source"

    @abstractmethod
    def describe(self) -> str:
        """A human-readable location, with no secrets in it."""

    def check(self) -> None:
        """Cheaply check that what the configuration names exists (bucket, table, columns),
        before any document is read. Raises `SourceUnavailableError` naming the setting.
        By default there is nothing to check: listing says all there is to say."""
        return None

    @abstractmethod
    def list_entries(self) -> Iterator[SourceEntry]:
        """Every document currently in the source. Raises `SourceUnavailableError`."""

    @abstractmethod
    def read(self, doc_id: str) -> RawDocument:
        """One document. Raises `DocumentReadError` if it cannot be read."""

    def listing_gaps(self) -> list[ListingGap]:
        """What the last `list_entries` or `entries_for` could not see, beneath a source that
        was itself readable. By default a listing sees everything or fails as a whole."""
        return []

    def read_many(
        self, doc_ids: Iterable[str]
    ) -> Iterator[tuple[str, RawDocument | DocumentReadError]]:
        """Several documents; sources that can fetch in bulk override this."""
        for doc_id in doc_ids:
            try:
                yield doc_id, self.read(doc_id)
            except DocumentReadError as error:
                yield doc_id, error

    def entries_for(self, doc_ids: list[str]) -> Iterator[SourceEntry]:
        """Entries for just these ids (those that still exist); sources may do this cheaper."""
        wanted = set(doc_ids)
        return (entry for entry in self.list_entries() if entry.doc_id in wanted)

    # ------------------------------------------------------------ change detection

    def change_token(self, entry: SourceEntry, previous: object) -> object:
        """What the sensor remembers per document; by default the source version."""
        return entry.version

    def acknowledge(self, receipts: list[str]) -> None:
        """Let a change feed forget messages whose changes are now in a committed cursor;
        sources without a feed have nothing to do."""
        return None

    def is_change(self, previous: object, token: object) -> bool:
        return previous != token

    def baseline_state(self) -> dict | None:
        """The change state a first look can start from without listing, for a source whose
        later looks do not compare listings (a change feed); None: a first look lists."""
        return None

    def changes_since(self, state: dict | None) -> ChangeSet:
        """Documents added, changed or deleted since `state` (None: everything is new)."""
        previous = state or {}
        current: dict = {}
        result = ChangeSet()
        for entry in self.list_entries():
            old = previous.get(entry.doc_id)
            token = self.change_token(entry, old)
            current[entry.doc_id] = token
            if old is None or self.is_change(old, token):
                result.changed.append(entry)
        result.deleted = sorted(set(previous) - set(current))
        result.state = current
        return result


class PartitionFilter(DocumentSource):
    """One shard's view of a source: only the documents `owns` accepts."""

    def __init__(self, source: DocumentSource, owns, label: str) -> None:  # noqa: ANN001
        self.inner = source
        self.owns = owns
        self.label = label
        self.kind = source.kind

    def describe(self) -> str:
        return f"{self.inner.describe()} [{self.label}]"

    def check(self) -> None:
        self.inner.check()

    def list_entries(self) -> Iterator[SourceEntry]:
        return (e for e in self.inner.list_entries() if self.owns(e.doc_id))

    def entries_for(self, doc_ids: list[str]) -> Iterator[SourceEntry]:
        return self.inner.entries_for([d for d in doc_ids if self.owns(d)])

    def read(self, doc_id: str) -> RawDocument:
        return self.inner.read(doc_id)

    def listing_gaps(self) -> list[ListingGap]:
        return self.inner.listing_gaps()

    def read_many(
        self, doc_ids: Iterable[str]
    ) -> Iterator[tuple[str, RawDocument | DocumentReadError]]:
        return self.inner.read_many(doc_ids)
