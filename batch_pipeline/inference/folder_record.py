"""A model folder written by the pipeline (a converted chat model, a fine-tuned encoder) and
the record of what was written: each file's SHA-256, kept in a record file inside it, checked
before the folder is loaded. A file added, missing, edited or damaged since is named."""

import hashlib
import json
from pathlib import Path

HASH_CHUNK = 1 << 20  # files are hashed a MiB at a time


def folder_hashes(folder: Path, record_file: str) -> dict[str, str]:
    """SHA-256 of each file of `folder` but its record, by relative path."""
    hashes = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name == record_file:
            continue
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(HASH_CHUNK):
                digest.update(chunk)
        hashes[str(path.relative_to(folder))] = digest.hexdigest()
    return hashes


def write_folder_record(folder: Path, record_file: str, about: dict) -> None:
    """Record what was written into `folder`: `about`, and each file's SHA-256."""
    record = {**about, "sha256": folder_hashes(folder, record_file)}
    (folder / record_file).write_text(json.dumps(record, indent=2), encoding="utf-8")


def read_folder_record(folder: Path, record_file: str) -> dict | None:
    """The folder's record, or None where it is missing or unreadable."""
    try:
        record = json.loads((folder / record_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def folder_problem(folder: Path, record_file: str, since: str) -> str | None:
    """Why `folder` must not be loaded (a file added, missing, edited or damaged `since` it
    was written: "since it was converted"; or no record of it), or None."""
    record = read_folder_record(folder, record_file)
    written = record.get("sha256") if record is not None else None
    if not isinstance(written, dict):
        return f"has no readable {record_file} (written before the check, or interrupted)"
    try:
        found = folder_hashes(folder, record_file)
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    changed = sorted(
        name for name in written.keys() | found.keys() if written.get(name) != found.get(name)
    )
    if changed:
        named = ", ".join(changed[:5]) + (
            f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        )
        return f"has {named} changed {since} (edited or damaged)"
    return None
