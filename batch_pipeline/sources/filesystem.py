"""Documents in a local folder. The doc id is the POSIX path relative to the folder.

Symlinks are never followed and no path may leave the root, so a link or a `../` id cannot
make the pipeline read files outside the collection. A folder beneath the root that cannot
be opened (permissions, an I/O error) is a `ListingGap`, not an empty folder: its documents
are unknown, and keep their rows.
"""

import errno
import hashlib
import math
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path, PurePosixPath
from stat import S_ISREG

from batch_pipeline.sources.base import (
    LOOK_SECONDS,
    ChangeSet,
    DocumentReadError,
    DocumentSource,
    ListingGap,
    RawDocument,
    SourceEntry,
    SourceUnavailableError,
)
from batch_pipeline.transient import is_transient

GONE = (errno.ENOENT, errno.ENOTDIR)  # what says a document is not there, as opposed to unseen
MIN_HASH_READ_SECONDS = 1.0  # the shortest read timeout a hash is given
NOT_HASHED = ""  # a file's digest in the sensor's state before a look had time to hash it


def escaped_name(name: str) -> str:
    """A file name as UTF-8 text: bytes that are not UTF-8 as `\\xNN`."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


MAX_SHOWN = 240  # a name longer than this is shown cut, with a hash of the rest


def shown_name(name: str) -> str:
    """A name short enough to be a failure's key and to read: cut in the middle if need be,
    with a hash of the whole, so two long names stay apart."""
    if len(name) <= MAX_SHOWN:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{name[:120]}...[{digest}]...{name[-80:]}"


def utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes, kept by the OS as surrogates
        return False
    return True


@cache
def glob_pattern(glob: str) -> re.Pattern[str]:
    """`Path.glob`'s matching of a relative POSIX path: `*` and `?` within one name, `[...]`,
    and `**` for any number of folders."""
    parts = []
    for segment in glob.split("/"):
        if segment == "**":
            parts.append("(?:[^/]+/)*")
            continue
        out, i = "", 0
        while i < len(segment):
            char = segment[i]
            close = segment.find("]", i + 2) if char == "[" else -1
            if char == "*":
                out += "[^/]*"
            elif char == "?":
                out += "[^/]"
            elif close != -1:
                body = segment[i + 1 : close]
                out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
                i = close
            else:
                out += re.escape(char)
            i += 1
        parts.append(out + "/")
    return re.compile("".join(parts).removesuffix("/") + r"\Z")


class _Reader:
    """One daemon thread that reads files in turn, handed them one at a time. The thread
    ends after `idle_seconds` without a file and the next read starts another, so a process
    that opens many sources (a sensor's ticks, a test session) keeps no idle threads."""

    IDLE_SECONDS = 2.0

    def __init__(self, read, idle_seconds: float | None = None) -> None:  # noqa: ANN001
        self._read = read  # FilesystemSource.read
        self._idle = self.IDLE_SECONDS if idle_seconds is None else idle_seconds
        self._jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._serving = False

    def _serve(self) -> None:
        while True:
            try:
                doc_id = self._jobs.get(timeout=self._idle)
            except queue.Empty:
                with self._lock:  # a read hands its job over under this lock
                    if self._jobs.empty():
                        self._serving = False
                        return
                continue
            try:
                self._results.put(self._read(doc_id))
            except BaseException as error:  # handed back to the caller's thread
                self._results.put(error)

    def read(self, doc_id: str, timeout: float) -> RawDocument:
        """The file's bytes; raises what the read raised, or queue.Empty after `timeout`."""
        with self._lock:
            self._jobs.put(doc_id)
            if not self._serving:
                self._serving = True
                threading.Thread(target=self._serve, name="source-read", daemon=True).start()
        result = self._results.get(timeout=timeout)
        if isinstance(result, BaseException):
            raise result
        return result


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:  # as os.walk: what cannot be looked at is not walked into
        return False


def _entry(doc_id: str, stat: os.stat_result) -> SourceEntry:
    return SourceEntry(doc_id, f"{stat.st_mtime_ns}:{stat.st_size}", stat.st_size, stat.st_mtime)


class FilesystemSource(DocumentSource):
    kind = "filesystem"

    def __init__(
        self,
        root: Path,
        glob: str = "**/*.md",
        read_timeout: float = 60.0,
        hash_seconds: float = LOOK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = Path(root)
        self.glob = glob
        self.read_timeout = read_timeout
        self.hash_seconds = hash_seconds
        self._clock = clock
        self._hash_until = math.inf  # a look (`changes_since`) sets its own
        self._gaps: list[ListingGap] = []
        self._reader: _Reader | None = None

    def describe(self) -> str:
        return f"{self.root} ({self.glob})"

    def check(self) -> None:
        self._require_root()

    def _require_root(self) -> None:
        if not self.root.is_dir():
            raise SourceUnavailableError(
                f"source folder {self.root} does not exist or is not a folder; "
                "fix the collection's source.path in the configuration"
            )

    def list_entries(self) -> Iterator[SourceEntry]:
        """Every regular file the glob matches, sorted by path; hidden files and folders
        (editor swap files, `.git`) are skipped, and symlinks are never followed.

        The walk goes depth first, each folder's names sorted, so the entries come out in
        order as they are found: memory holds the folders on the way down, not the tree, and
        the first entry comes before the last folder is listed."""
        self._require_root()
        self._gaps = []
        pattern = glob_pattern(self.glob)
        root = os.fspath(self.root)
        stack = [("", iter(self._names(root, "")))]
        while stack:
            prefix, names = stack[-1]
            item = next(names, None)
            if item is None:
                stack.pop()
                continue
            name, is_folder = item
            rel = prefix + name
            if is_folder:
                folder = os.path.join(root, rel)
                stack.append((rel + "/", iter(self._names(folder, rel + "/"))))
                continue
            if not pattern.match(rel):
                continue
            if not utf8_name(rel):
                shown = shown_name(escaped_name(rel))
                reason = f"the name {shown!r} is not UTF-8: rename the file"
                self._gaps.append(ListingGap(shown, reason, bad_name=True))
                continue
            try:
                stat = os.lstat(os.path.join(root, rel))
            except OSError as error:
                if error.errno not in GONE:
                    self._unseen(rel, error)
                continue
            if S_ISREG(stat.st_mode):  # not a link, a FIFO or a device
                yield _entry(rel, stat)

    def _names(self, folder: str, prefix: str) -> list[tuple[str, bool]]:
        """A folder's visible names, sorted, each with whether it is a folder to walk into (a
        symlink to one is not). `prefix` is the folder's path under the root ("" for the root).
        A folder beneath the root that is gone by the time the walk reaches it holds nothing;
        one that cannot be listed is a gap; the root itself, an error."""
        try:
            with os.scandir(folder) as scan:
                return sorted(
                    (entry.name, _is_folder(entry))
                    for entry in scan
                    if not entry.name.startswith(".")
                )
        except OSError as error:
            if not prefix:
                raise SourceUnavailableError(
                    f"cannot list source folder {self.root}: {error.strerror or error}",
                    is_transient(error),  # a network mount that timed out, say
                ) from error
            if error.errno in GONE:  # removed since its parent was listed: its files are gone
                return []
            rel = escaped_name(prefix.removesuffix("/"))
            too_long = error.errno == errno.ENAMETOOLONG
            rel = shown_name(rel) if too_long else rel  # nothing beneath it ever landed
            reason = f"cannot list {rel}/: {error.strerror}"
            self._gaps.append(ListingGap(rel + "/", reason, too_long))
            return []

    def listing_gaps(self) -> list[ListingGap]:
        return list(self._gaps)

    def _unseen(self, doc_id: str, error: OSError) -> None:
        too_long = error.errno == errno.ENAMETOOLONG
        shown = shown_name(doc_id) if too_long else doc_id  # a landed one keeps its exact id
        self._gaps.append(ListingGap(shown, f"cannot look at {shown}: {error.strerror}", too_long))

    def _inside_root(self, path: Path) -> bool:
        # No symlinked folder on the way down either.
        current = path.parent
        while current != self.root and current != current.parent:
            if current.is_symlink():
                return False
            current = current.parent
        return current == self.root

    def _path(self, doc_id: str) -> Path:
        rel = PurePosixPath(doc_id)
        if rel.is_absolute() or ".." in rel.parts or "\x00" in doc_id:
            raise DocumentReadError(f"refusing doc id {doc_id!r}: it points outside the source")
        path = self.root.joinpath(*rel.parts)
        if path.is_symlink() or not self._inside_root(path):
            raise DocumentReadError(f"refusing {doc_id!r}: symlinks are not followed")
        return path

    def entries_for(self, doc_ids: list[str]) -> Iterator[SourceEntry]:
        self._require_root()
        self._gaps = []
        for doc_id in doc_ids:
            try:
                path = self._path(doc_id)
                stat = path.lstat()
            except DocumentReadError:
                continue
            except OSError as error:
                if error.errno not in GONE:  # there, perhaps, but not to be seen: not deleted
                    self._unseen(doc_id, error)
                continue
            if S_ISREG(stat.st_mode):
                yield _entry(doc_id, stat)

    def read(self, doc_id: str) -> RawDocument:
        """The file's bytes. Opened without following a link and without blocking, so a file
        swapped for a FIFO after listing is refused at once rather than waited on."""
        path = self._path(doc_id)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(path, flags)
            with os.fdopen(fd, "rb") as handle:
                if not S_ISREG(os.fstat(fd).st_mode):
                    raise DocumentReadError(
                        f"{doc_id!r} is not a regular file (a FIFO, socket or device)"
                    )
                return RawDocument(handle.read())
        except FileNotFoundError:
            raise DocumentReadError(f"{doc_id!r} was deleted before it could be read") from None
        except OSError as error:
            raise DocumentReadError(f"cannot read {doc_id!r}: {error.strerror}") from None

    def read_many(
        self, doc_ids: Iterable[str]
    ) -> Iterator[tuple[str, RawDocument | DocumentReadError]]:
        """Each file, or why it could not be read (`read_within_timeout`)."""
        for doc_id in doc_ids:
            try:
                yield doc_id, self.read_within_timeout(doc_id)
            except DocumentReadError as error:
                yield doc_id, error

    def read_within_timeout(self, doc_id: str, timeout: float | None = None) -> RawDocument:
        """The file, read by a worker thread within `timeout` seconds (`read_timeout` by
        default): a read that hangs (a stale network mount) raises a transient
        `DocumentReadError`, and the run (or the sensor's tick) goes on. The hung thread is
        left to its read (a daemon: it cannot keep the process from exiting), and the next
        file gets a new one."""
        timeout = self.read_timeout if timeout is None else timeout
        if self._reader is None:
            self._reader = _Reader(self.read)
        try:
            return self._reader.read(doc_id, timeout)
        except queue.Empty:
            self._reader = None
            message = f"reading {doc_id!r} took over {timeout:g}s (a hung mount?)"
            raise DocumentReadError(message, transient=True) from None

    # The sensor remembers [mtime:size, sha256] per file and hashes only files whose mtime or
    # size moved, within `hash_seconds` per look ("" for a file not hashed yet, None for one
    # that could not be read).
    def changes_since(self, state: dict | None) -> ChangeSet:
        """What changed since `state`, hashing for at most `hash_seconds`, so a look at a
        large folder stays well inside Dagster's 60 s sensor timeout: a new file is a change
        whether hashed or not, and its hash is filled in by a later look; a file whose mtime
        or size moved, with no time left to hash it, is put off to the next look."""
        self._hash_until = self._clock() + self.hash_seconds
        try:
            return super().changes_since(state)
        finally:
            self._hash_until = math.inf

    def change_token(self, entry: SourceEntry, previous: object) -> object:
        known = previous if isinstance(previous, list) and len(previous) == 2 else None
        if known is not None and known[0] == entry.version:
            if known[1] == NOT_HASHED and self._hash_time() > 0:
                return [entry.version, self._digest(entry)]  # filled in: not a change
            return known
        if known is not None and known[1] and self._hash_time() <= 0:
            return known  # it moved, but there is no time left to compare: the next look does
        return [entry.version, self._digest(entry) if self._hash_time() > 0 else NOT_HASHED]

    def is_change(self, previous: object, token: object) -> bool:
        if not (isinstance(previous, list) and len(previous) == 2):
            return True
        if previous[0] == token[0]:  # unchanged, a hash filled in, or put off to the next look
            return previous[1] is None  # unreadable at the last look: still a change
        return not (previous[1] and previous[1] == token[1])  # unless touched, same bytes

    def _hash_time(self) -> float:
        return self._hash_until - self._clock()

    def _digest(self, entry: SourceEntry) -> str | None:
        """The file's sha256, or None if it cannot be read within the read timeout (nor
        within the look's time left: a hung mount does not hold the tick)."""
        timeout = min(self.read_timeout, max(self._hash_time(), MIN_HASH_READ_SECONDS))
        try:
            return hashlib.sha256(self.read_within_timeout(entry.doc_id, timeout).data).hexdigest()
        except DocumentReadError:
            return None
