"""Prepare for briefs: render the prompt of every document whose brief is stale.

The input is the collection's own collect output (`source_documents`): every document with its
status and content hash. A document's brief is stale if and only if its staleness key, the
hash of its content hash and the generation's fingerprint (prompt version, schema version,
sampling, document budget, model fingerprint), differs from the key its brief landed under.

For each stale document the prompt is rendered: the template's shared system part, and its
document part with `$title`, `$doc_id` and `$text`, the text cut at `document_tokens` tokens
by the model's own tokenizer (the row says when it was). A stale document that collect did
not read (unchanged for the index, but its brief is stale: a new prompt, say) is read here.
Deleted documents are listed for land, and on a full pass so are briefs of documents the
source no longer has. Documents collect could not read keep the brief they have. A document
whose brief failed under the current key (an invalid output, a prompt too long) is not
tried again: greedy decoding would give the same output; a change to it or to the
configuration gives it a new key, and a new try.

The output holds only the prompts to generate; memory holds one read batch and the landed
keys.
"""

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from batch_pipeline.config.prompt import PromptTemplate
from batch_pipeline.inference.generator import Generator
from batch_pipeline.iterables import batched
from batch_pipeline.stages.collect import CHANGED, DELETED, NEW, UNCHANGED
from batch_pipeline.stages.prompt_plan import prepared_prompts_schema
from batch_pipeline.state.staging import StagePath, StageWriter, is_full_pass, read_batches

READ_BATCH = 64  # documents read from the source at once when collect did not read them


@dataclass(frozen=True)
class ReadDocument:
    """A document read for its brief: its title and text, or why it could not be read."""

    doc_id: str
    title: str | None = None
    text: str | None = None
    error: str | None = None


Reader = Callable[[list[str]], Iterator[ReadDocument]]


def brief_key(content_hash: str, fingerprint: str) -> str:
    """A brief is regenerated if and only if this key changed."""
    return hashlib.sha256(f"{content_hash}:{fingerprint}".encode()).hexdigest()


def brief_prompts_schema() -> pa.Schema:
    """Prepare's output: the prompt plan's columns, and what land needs of each document."""
    return (
        prepared_prompts_schema()
        .append(pa.field("doc_id", pa.string(), nullable=False))
        .append(pa.field("title", pa.string()))
        .append(pa.field("content_hash", pa.string(), nullable=False))
        .append(pa.field("truncated", pa.bool_(), nullable=False))
    )


@dataclass
class BriefPrepareSummary:
    documents: int = 0  # seen in collect's output, deleted ones included
    stale: int = 0  # prompts written
    fresh: int = 0  # briefs already landed under the current key
    failed_before: int = 0  # failed under the current key: the same greedy output again
    truncated: int = 0  # of the stale, cut to the document budget
    read_here: int = 0  # of the stale, read by this stage (collect had not)
    deleted: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)  # doc_id -> why
    full_pass: bool = True

    def record(self) -> dict[str, object]:
        return {
            "documents": self.documents,
            "stale": self.stale,
            "fresh": self.fresh,
            "failed_before": self.failed_before,
            "truncated": self.truncated,
            "read_here": self.read_here,
            "deleted": self.deleted,
            "unreadable": self.unreadable,
            "full_pass": self.full_pass,
        }

    def metadata(self) -> dict[str, object]:
        return {
            "documents_seen": self.documents,
            "briefs_stale": self.stale,
            "briefs_fresh": self.fresh,
            "briefs_failed_before": self.failed_before,
            "documents_truncated": self.truncated,
            "documents_read_for_briefs": self.read_here,
            "briefs_to_delete": len(self.deleted),
            "documents_unreadable": len(self.unreadable),
        }


def prepare_briefs(
    collected_path: StagePath | Path,
    out_path: StagePath | Path,
    landed: dict[str, str],
    failed: dict[str, str],
    fingerprint: str,
    template: PromptTemplate,
    document_tokens: int,
    generator: Generator,
    read: Reader,
) -> BriefPrepareSummary:
    """Write the stale documents' prompts (see the module docstring)."""
    started = time.perf_counter()
    summary = BriefPrepareSummary(full_pass=is_full_pass(collected_path))
    seen: set[str] = set()
    columns = ["doc_id", "status", "content_hash", "title", "text"]
    with StageWriter(out_path, brief_prompts_schema(), started) as writer:

        def write(doc_id: str, title: str | None, text: str, digest: str) -> None:
            body, cut = generator.truncate(text, document_tokens)
            user = template.render(title=title or doc_id, doc_id=doc_id, text=body)
            writer.write(
                {
                    "input_hash": brief_key(digest, fingerprint),
                    "system": template.system,
                    "user": user,
                    "doc_id": doc_id,
                    "title": title,
                    "content_hash": digest,
                    "truncated": cut,
                }
            )
            summary.stale += 1
            summary.truncated += cut

        for record_batch in read_batches(collected_path, columns):
            unread: dict[str, str] = {}  # stale, but collect did not read them
            for row in record_batch.to_pylist():
                doc_id, status, digest = row["doc_id"], row["status"], row["content_hash"]
                summary.documents += 1
                seen.add(doc_id)
                if status == DELETED:
                    if doc_id in landed:
                        summary.deleted.append(doc_id)
                    continue
                if status not in (NEW, CHANGED, UNCHANGED) or digest is None:
                    continue  # failed or quarantined: the brief it has stays
                key = brief_key(digest, fingerprint)
                if landed.get(doc_id) == key:
                    summary.fresh += 1
                elif failed.get(doc_id) == key:
                    summary.failed_before += 1  # greedy: it would fail the same way again
                elif row["text"] is not None:
                    write(doc_id, row["title"], row["text"], digest)
                else:
                    unread[doc_id] = digest
            for ids in batched(list(unread), READ_BATCH):
                for doc in read(ids):
                    if doc.text is None:
                        summary.unreadable[doc.doc_id] = doc.error or "unreadable"
                        continue
                    summary.read_here += 1
                    write(doc.doc_id, doc.title, doc.text, unread[doc.doc_id])
        if summary.full_pass:  # briefs of documents the source no longer lists
            summary.deleted += sorted(set(landed) - seen - set(summary.deleted))
        writer.summary = summary.record()
    return summary
