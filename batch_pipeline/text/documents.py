"""Checking and decoding a document's bytes before anything else touches them."""

import hashlib


class DocumentError(ValueError):
    """A document that cannot be embedded; `reason` is a short machine-readable label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def content_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def decode_document(raw: bytes) -> str:
    """The document's text, or `DocumentError` saying why it cannot be used."""
    if not raw:
        raise DocumentError("empty", "the document is empty (0 bytes)")
    if b"\x00" in raw[:8192]:
        raise DocumentError("binary", "the document looks binary (it contains NUL bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(
            "invalid_utf8", f"the document is not valid UTF-8 (byte {error.start})"
        ) from None
    if not text.strip():
        raise DocumentError("whitespace_only", "the document holds only whitespace")
    return text
