"""The tracking store's record of landed documents and of changes pending at the source:
what each generation holds (content hash, source version, chunks, the run that landed it) and
how fresh it is. Mixed into `TrackingStore`."""

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.iterables import batched
from batch_pipeline.state.tracking.schema import (
    documents,
    failures,
    pending,
    write_racing_inserts,
)


@dataclass(frozen=True)
class LandedDocument:
    doc_id: str
    content_hash: str
    source_version: str
    fingerprint: str
    run_id: str
    landed_at: float
    source_changed_at: float | None = None


class DocumentRecords:
    """Reads and writes the `documents` and `pending` tables. Mixed into TrackingStore."""

    engine: Engine

    def landed_documents(
        self, index: str, doc_ids: list[str] | None = None
    ) -> dict[str, LandedDocument]:
        """What tracking says is landed: every document, or only these `doc_ids`."""
        query = sa.select(
            documents.c.doc_id,
            documents.c.content_hash,
            documents.c.source_version,
            documents.c.fingerprint,
            documents.c.run_id,
            documents.c.landed_at,
            documents.c.source_changed_at,
        ).where(documents.c.generation == index)
        with self.engine.connect() as conn:
            if doc_ids is None:
                return {row.doc_id: LandedDocument(*row) for row in conn.execute(query)}
            found: dict[str, LandedDocument] = {}
            for batch in batched(doc_ids):
                rows = conn.execute(query.where(documents.c.doc_id.in_(batch)))
                found.update({row.doc_id: LandedDocument(*row) for row in rows})
            return found

    def record_landed(
        self,
        index: str,
        landed: list[dict[str, Any]],
        deleted: list[str],
        run_id: str,
        settled: list[str] = (),
    ) -> None:
        """Upsert landed documents, forget deleted ones and clear their failures, atomically.

        Pending changes of landed, deleted and `settled` (failed, recorded) documents are done.
        """
        now = time.time()
        ids = [doc["doc_id"] for doc in landed] + list(deleted)
        with self.engine.begin() as conn:
            for batch in batched(ids):
                for table in (documents, failures):
                    conn.execute(
                        table.delete().where(table.c.generation == index, table.c.doc_id.in_(batch))
                    )
            for batch in batched(ids + list(settled)):
                conn.execute(
                    pending.delete().where(
                        pending.c.generation == index, pending.c.doc_id.in_(batch)
                    )
                )
            if landed:
                conn.execute(
                    documents.insert(),
                    [
                        {"generation": index, "run_id": run_id, "landed_at": now, **doc}
                        for doc in landed
                    ],
                )

    def update_source_versions(self, index: str, versions: dict[str, str]) -> None:
        """Remember new versions of documents whose content did not change (touched files)."""
        if not versions:
            return
        with self.engine.begin() as conn:
            for doc_id, version in versions.items():
                conn.execute(
                    documents.update()
                    .where(documents.c.generation == index, documents.c.doc_id == doc_id)
                    .values(source_version=version)
                )

    def forget_content(self, index: str, doc_ids: list[str]) -> None:
        """Forget what these documents' landed content was, so the next run reads them again."""
        with self.engine.begin() as conn:
            for batch in batched(doc_ids):
                conn.execute(
                    documents.update()
                    .where(documents.c.generation == index, documents.c.doc_id.in_(batch))
                    .values(content_hash="", source_version="")
                )

    def iter_documents(
        self, index: str, columns: list[str], page_rows: int = 10000
    ) -> Iterator[list[tuple]]:
        """These columns of every landed document, streamed a page of rows at a time."""
        query = sa.select(*(documents.c[name] for name in columns)).where(
            documents.c.generation == index
        )
        with self.engine.connect() as conn:
            result = conn.execution_options(yield_per=page_rows).execute(query)
            for page in result.partitions():
                yield [tuple(row) for row in page]

    def landed_doc_ids(self, index: str) -> set[str]:
        query = sa.select(documents.c.doc_id).where(documents.c.generation == index)
        with self.engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def document_count(self, index: str) -> int:
        query = sa.select(sa.func.count()).where(documents.c.generation == index)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def record_pending(self, index: str, changes: dict[str, float | None]) -> None:
        """Remember source changes not yet landed (the earliest change time wins)."""
        if not changes:
            return
        now = time.time()

        def insert_missing(conn: sa.Connection) -> None:
            known = {
                doc_id
                for batch in batched(changes)
                for doc_id in conn.execute(
                    sa.select(pending.c.doc_id).where(
                        pending.c.generation == index, pending.c.doc_id.in_(batch)
                    )
                ).scalars()
            }
            new = [
                {
                    "generation": index,
                    "doc_id": doc_id,
                    "changed_at": changed_at or now,
                    "detected_at": now,
                }
                for doc_id, changed_at in changes.items()
                if doc_id not in known
            ]
            if new:
                conn.execute(pending.insert(), new)

        write_racing_inserts(self.engine, insert_missing)

    def freshness(self, index: str) -> dict[str, float | int | None]:
        """Newest source change landed, oldest change pending, and how many are pending."""
        with self.engine.connect() as conn:
            newest = conn.execute(
                sa.select(sa.func.max(documents.c.source_changed_at)).where(
                    documents.c.generation == index
                )
            ).scalar()
            oldest, count = conn.execute(
                sa.select(sa.func.min(pending.c.changed_at), sa.func.count()).where(
                    pending.c.generation == index
                )
            ).one()
        return {"newest_landed": newest, "oldest_pending": oldest, "pending": int(count)}

    def chunk_total(self, index: str) -> int:
        """Chunks of every landed document of generation `index`."""
        query = sa.select(sa.func.coalesce(sa.func.sum(documents.c.chunk_count), 0)).where(
            documents.c.generation == index
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
