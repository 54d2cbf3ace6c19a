"""A document read the one way every product reads it: its content hash (over its bytes and
its source's metadata), the size limit, and its text decoded and checked, or why it cannot be
used. Collect reads the collection's documents through it, and the briefs the documents
collect did not read."""

import json
from dataclasses import dataclass

from batch_pipeline.sources.base import DocumentReadError, RawDocument
from batch_pipeline.text.documents import DocumentError, content_hash, decode_document
from batch_pipeline.text.normalize import detect_format, parse_document


def metadata_json(metadata: dict | None) -> str | None:
    """Metadata as canonical JSON (sorted keys; None when there is none)."""
    return json.dumps(metadata, sort_keys=True, default=str) if metadata else None


def too_large(size: int, max_bytes: int) -> DocumentError:
    """The error of a document over the size limit (seen in a listing, or read)."""
    return DocumentError("too_large", f"{size} bytes is over max_document_bytes ({max_bytes})")


@dataclass(frozen=True)
class DocumentText:
    """A document as read: its content hash and metadata (None for a document that could
    not be read at all), and its text and format, or the error that says why not."""

    doc_id: str
    digest: str | None
    metadata: str | None = None
    text: str | None = None
    fmt: str | None = None
    source_title: str | None = None  # the title the source gave, if any
    error: DocumentError | DocumentReadError | None = None

    @property
    def reason(self) -> str | None:
        """Why the document cannot be used, as a short label; None when it can."""
        if self.error is None:
            return None
        return getattr(self.error, "reason", "unreadable")

    def title(self) -> str:
        """The source's title, or the document's own (parsed only when asked: collect does
        not parse an unchanged document)."""
        assert self.text is not None and self.fmt is not None, "no text to take a title from"
        return self.source_title or parse_document(self.text, self.doc_id, self.fmt).title


def read_document(
    doc_id: str, result: RawDocument | DocumentReadError, max_bytes: int
) -> DocumentText:
    """What `result` (one answer of a source's `read_many`) holds, checked against the size
    limit (`limits.max_document_bytes`)."""
    if isinstance(result, DocumentReadError):
        return DocumentText(doc_id, None, error=result)
    metadata = metadata_json(result.metadata)
    # the source's metadata is part of the content: a change to it alone re-lands the document
    digest = content_hash(result.data + (b"\0" + metadata.encode() if metadata else b""))
    size = len(result.data)
    if size > max_bytes:
        return DocumentText(doc_id, digest, metadata, error=too_large(size, max_bytes))
    try:
        text = decode_document(result.data)
    except DocumentError as error:
        return DocumentText(doc_id, digest, metadata, error=error)
    fmt = result.fmt or detect_format(doc_id)
    return DocumentText(doc_id, digest, metadata, text, fmt, result.title)
