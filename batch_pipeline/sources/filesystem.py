"""Documents in a local folder. The doc id is the POSIX path relative to the folder.

Symlinks are never followed and no path may leave the root, so a link or a `../` id cannot
make the pipeline read files outside the collection.
"""

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from batch_pipeline.sources.base import (
    DocumentReadError,
    DocumentSource,
    RawDocument,
    SourceEntry,
    SourceUnavailableError,
)


def _entry(doc_id: str, stat: os.stat_result) -> SourceEntry:
    return SourceEntry(doc_id, f"{stat.st_mtime_ns}:{stat.st_size}", stat.st_size, stat.st_mtime)


class FilesystemSource(DocumentSource):
    kind = "filesystem"

    def __init__(self, root: Path, glob: str = "**/*.md") -> None:
        self.root = Path(root)
        self.glob = glob

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
        self._require_root()
        for path in sorted(self.root.glob(self.glob)):
            if not self._inside_root(path) or path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(self.root).as_posix()
            if any(part.startswith(".") for part in PurePosixPath(rel).parts):
                continue  # hidden files and folders, editor swap files
            yield _entry(rel, path.lstat())

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
        for doc_id in doc_ids:
            try:
                path = self._path(doc_id)
                stat = path.lstat()
            except (DocumentReadError, OSError):
                continue
            if path.is_file():
                yield _entry(doc_id, stat)

    def read(self, doc_id: str) -> RawDocument:
        path = self._path(doc_id)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as handle:
                return RawDocument(handle.read())
        except FileNotFoundError:
            raise DocumentReadError(f"{doc_id!r} was deleted before it could be read") from None
        except OSError as error:
            raise DocumentReadError(f"cannot read {doc_id!r}: {error.strerror}") from None

    # The sensor remembers [mtime:size, sha256] and hashes only files whose mtime or size moved.
    def change_token(self, entry: SourceEntry, previous: object) -> object:
        if isinstance(previous, list) and len(previous) == 2 and previous[0] == entry.version:
            return previous
        try:
            digest = hashlib.sha256(self.read(entry.doc_id).data).hexdigest()
        except DocumentReadError:
            digest = None
        return [entry.version, digest]

    def is_change(self, previous: object, token: object) -> bool:
        if not (isinstance(previous, list) and len(previous) == 2):
            return True
        return previous[1] != token[1] or token[1] is None
