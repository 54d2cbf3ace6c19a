"""Prepare for briefs: render the prompt of every document whose brief is stale.

The input is the collection's own collect output (`source_documents`): every document with its
status and content hash. A document's brief is stale if and only if its staleness key, the
hash of its doc id, its content hash and the generation's fingerprint (prompt version, schema
version, sampling, document budget, model fingerprint), differs from the key its brief landed
under. The doc id is in the key so two documents with the same content never share one.

For each stale document the prompt is rendered: the template's shared system part, and its
document part with `$title`, `$doc_id` and `$text`, the text cut at `document_tokens` tokens
by the model's own tokenizer (the row says when it was). A stale document that collect did
not read (unchanged for the index, but its brief is stale: a new prompt, say) is read here.
Deleted documents are listed for land, and on a full pass so are briefs of documents the
source no longer has. Documents collect could not read keep the brief they have. A document
whose brief failed under the current key as often as it may (an invalid output: once in
float32, where greedy decoding gives the same output in any batch; twice in bfloat16, where
it does not: `BriefProduct.invalid_output_tries`) is not tried again; a change to it or to
the configuration gives it a new key, and a new try.

The output holds only the prompts to generate. Memory stays flat as the corpus grows: the
documents' keys and the landed briefs' keys are spilled to scratch disk in buckets by doc id
and compared a bucket at a time (`state.spill`, as collect finds deletions and land joins
vectors); the stale rows found are spilled by row number, and collect's output is then read
once more, each range of rows meeting one bucket of them, to write the prompts in file order.
"""

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from batch_pipeline.briefs.store import key_map, spilled_keys
from batch_pipeline.config.prompt import PromptTemplate
from batch_pipeline.inference.generator import Generator
from batch_pipeline.iterables import batched
from batch_pipeline.stages.collect import CHANGED, DELETED, NEW, UNCHANGED
from batch_pipeline.stages.prompt_plan import prepared_prompts_schema
from batch_pipeline.state.spill import BucketSpill, bucket_count, hash_buckets, scratch_dir
from batch_pipeline.state.staging import (
    StagePath,
    StageWriter,
    is_full_pass,
    read_batches,
    row_count,
)
from batch_pipeline.text.control_tokens import neutralised

READ_BATCH = 64  # documents read from the source at once when collect did not read them
BUCKET_DOCS = 65_536  # documents (and landed briefs) compared in memory at once
KEY_BATCH = 16_384  # collect's rows keyed and spilled at once (fewer, larger bucket writes)
LIVE = (NEW, CHANGED, UNCHANGED)  # statuses whose document has content to brief
# spilled: collect's rows keyed for their brief, and the stale rows
KEYED_SCHEMA = pa.schema(
    [("row", pa.int64()), ("doc_id", pa.string()), ("status", pa.string()), ("key", pa.string())]
)
STALE_SCHEMA = pa.schema([("row", pa.int64())])


@dataclass(frozen=True)
class ReadDocument:
    """A document read for its brief: its title and text, or why it could not be read."""

    doc_id: str
    title: str | None = None
    text: str | None = None
    error: str | None = None


Reader = Callable[[list[str]], Iterator[ReadDocument]]


def brief_key(doc_id: str, content_hash: str, fingerprint: str) -> str:
    """A brief is regenerated if and only if this key changed. It is the document's and its
    content's: two documents with the same content (or whose prompt differs only by
    `$doc_id`) have briefs of their own, each landed under its own key."""
    payload = json.dumps([doc_id, content_hash, fingerprint])
    return hashlib.sha256(payload.encode()).hexdigest()


def brief_prompts_schema() -> pa.Schema:
    """Prepare's output: the prompt plan's columns, and what land needs of each document."""
    return (
        prepared_prompts_schema()
        .append(pa.field("doc_id", pa.string(), nullable=False))
        .append(pa.field("title", pa.string()))
        .append(pa.field("content_hash", pa.string(), nullable=False))
        .append(pa.field("truncated", pa.bool_(), nullable=False))
        .append(pa.field("control_tokens", pa.int32(), nullable=False))
    )


@dataclass
class BriefPrepareSummary:
    documents: int = 0  # seen in collect's output, deleted ones included
    stale: int = 0  # prompts written
    fresh: int = 0  # briefs already landed under the current key
    failed_before: int = 0  # failed under the current key as often as it may: not tried again
    truncated: int = 0  # of the stale, cut to the document budget
    neutralised: int = 0  # of the stale, carrying the chat model's control tokens (broken)
    read_here: int = 0  # of the stale, read by this stage (collect had not)
    deleted: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)  # doc_id -> why
    full_pass: bool = True
    # live documents by partition (a shard, or the collection): what a full pass expects briefed
    live: dict[str, int] = field(default_factory=dict)

    def record(self) -> dict[str, object]:
        return {
            "documents": self.documents,
            "stale": self.stale,
            "fresh": self.fresh,
            "failed_before": self.failed_before,
            "truncated": self.truncated,
            "neutralised": self.neutralised,
            "read_here": self.read_here,
            "deleted": self.deleted,
            "unreadable": self.unreadable,
            "full_pass": self.full_pass,
            "live": self.live,
        }

    def metadata(self) -> dict[str, object]:
        return {
            "documents_seen": self.documents,
            "briefs_stale": self.stale,
            "briefs_fresh": self.fresh,
            "briefs_failed_before": self.failed_before,
            "documents_truncated": self.truncated,
            "documents_with_control_tokens": self.neutralised,
            "documents_read_for_briefs": self.read_here,
            "briefs_to_delete": len(self.deleted),
            "documents_unreadable": len(self.unreadable),
        }


def prepare_briefs(
    collected_path: StagePath | Path,
    out_path: StagePath | Path,
    landed: Iterable[pa.RecordBatch],
    landed_count: int,
    failed: dict[str, str],
    fingerprint: str,
    template: PromptTemplate,
    document_tokens: int,
    generator: Generator,
    read: Reader,
    partition_of: Callable[[str], str],
) -> BriefPrepareSummary:
    """Write the stale documents' prompts (see the module docstring). `landed` streams the
    partition's briefs as (doc_id, input_hash) batches, `landed_count` rows in all; `failed`
    maps a document whose brief failed to the key it failed under; `partition_of` names a
    document's partition, to count the live documents of each (`BriefPrepareSummary.live`)."""
    started = time.perf_counter()
    summary = BriefPrepareSummary(full_pass=is_full_pass(collected_path))
    buckets = bucket_count(max(row_count(collected_path), landed_count), BUCKET_DOCS)
    with scratch_dir(out_path) as tmp:
        stale = _stale_rows(
            collected_path, landed, buckets, failed, fingerprint, summary, Path(tmp), partition_of
        )
        with StageWriter(out_path, brief_prompts_schema(), started) as writer:
            controls = generator.control_tokens()

            def write(doc_id: str, title: str | None, text: str, digest: str) -> None:
                # a page's own control tokens would open turns of their own in the prompt
                (named, in_id), (shown, in_title), (body, in_text) = (
                    neutralised(part, controls) for part in (doc_id, title or doc_id, text)
                )
                body, cut = generator.truncate(body, document_tokens)
                user = template.render(title=shown, doc_id=named, text=body)
                found = in_id + in_title + in_text
                writer.write(
                    {
                        "input_hash": brief_key(doc_id, digest, fingerprint),
                        "system": template.system,
                        "user": user,
                        "doc_id": doc_id,
                        "title": title,
                        "content_hash": digest,
                        "truncated": cut,
                        "control_tokens": found,
                    }
                )
                summary.stale += 1
                summary.truncated += cut
                summary.neutralised += bool(found)

            for rows in _stale_in_file_order(collected_path, stale):
                unread: dict[str, str] = {}  # stale, but collect did not read them
                for row in rows:
                    if row["text"] is not None:
                        write(row["doc_id"], row["title"], row["text"], row["content_hash"])
                    else:
                        unread[row["doc_id"]] = row["content_hash"]
                for ids in batched(list(unread), READ_BATCH):
                    for doc in read(ids):
                        if doc.text is None:
                            summary.unreadable[doc.doc_id] = doc.error or "unreadable"
                            continue
                        summary.read_here += 1
                        write(doc.doc_id, doc.title, doc.text, unread[doc.doc_id])
            summary.deleted.sort()
            writer.summary = summary.record()
    return summary


def _stale_rows(
    collected_path: StagePath | Path,
    landed: Iterable[pa.RecordBatch],
    buckets: int,
    failed: dict[str, str],
    fingerprint: str,
    summary: BriefPrepareSummary,
    tmp: Path,
    partition_of: Callable[[str], str],
) -> BucketSpill:
    """Collect's rows whose brief is stale, spilled by row number in ranges of
    `BUCKET_DOCS`; counted into `summary`, with the briefs to delete and the live documents
    of each partition."""
    documents = BucketSpill(tmp, "documents", KEYED_SCHEMA)
    offset = 0
    keyed = ["doc_id", "status", "content_hash"]  # no text: a big batch is a few MiB
    for batch in read_batches(collected_path, keyed, batch_rows=KEY_BATCH):
        ids, statuses = batch["doc_id"].to_pylist(), batch["status"].to_pylist()
        digests = batch["content_hash"].to_pylist()
        keys = [
            brief_key(doc_id, digest, fingerprint)
            if status in LIVE and digest is not None
            else None
            for doc_id, status, digest in zip(ids, statuses, digests, strict=True)
        ]
        rows = np.arange(offset, offset + batch.num_rows, dtype=np.int64)
        table = pa.table({"row": rows, "doc_id": ids, "status": statuses, "key": keys})
        documents.add(table, hash_buckets(ids, buckets))
        offset += batch.num_rows
    documents.close()
    briefs = spilled_keys(landed, buckets, tmp)

    stale = BucketSpill(tmp, "stale", STALE_SCHEMA)
    for bucket in range(buckets):
        keys = key_map(briefs.read(bucket))
        seen: set[str] = set()
        found: list[int] = []
        rows = documents.read(bucket)
        summary.documents += rows.num_rows
        for row, doc_id, status, key in zip(
            *(rows[name].to_pylist() for name in KEYED_SCHEMA.names), strict=True
        ):
            seen.add(doc_id)
            if status == DELETED:
                if doc_id in keys:
                    summary.deleted.append(doc_id)
                continue
            if key is None:
                continue  # failed or quarantined: the brief it has stays
            live = partition_of(doc_id)
            summary.live[live] = summary.live.get(live, 0) + 1
            if keys.get(doc_id) == key:
                summary.fresh += 1
            elif failed.get(doc_id) == key:
                summary.failed_before += 1  # it had its tries under this key
            else:
                found.append(row)
        if summary.full_pass:  # briefs of documents the source no longer lists
            summary.deleted += sorted(set(keys) - seen)
        rows = np.array(sorted(found), dtype=np.int64)
        stale.add(pa.table({"row": rows}, schema=STALE_SCHEMA), rows // BUCKET_DOCS)
    stale.close()
    return stale


def _stale_in_file_order(
    collected_path: StagePath | Path, stale: BucketSpill
) -> Iterator[list[dict]]:
    """The stale rows of collect's output (doc_id, title, text, content_hash), in file
    order, a read batch at a time; only they are turned into Python objects."""
    columns = ["doc_id", "title", "text", "content_hash"]
    offset, loaded, wanted = 0, -1, np.zeros(0, dtype=np.int64)
    for batch in read_batches(collected_path, columns):
        end = offset + batch.num_rows
        rows: list[np.ndarray] = []
        for part in range(offset // BUCKET_DOCS, (end - 1) // BUCKET_DOCS + 1):
            if part != loaded:  # the next range's stale rows (each range is read once)
                wanted = np.sort(stale.read(part)["row"].to_numpy())
                loaded = part
            rows.append(wanted[(wanted >= offset) & (wanted < end)])
        take = np.concatenate(rows) - offset if rows else np.zeros(0, dtype=np.int64)
        if len(take):
            yield batch.take(pa.array(take)).to_pylist()
        offset = end
