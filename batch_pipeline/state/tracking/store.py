"""The tracking store: what has landed, what failed, each run's summary, and generations.

SQLAlchemy Core over any URL: SQLite under the pipeline home by default, PostgreSQL in
production. Every value is a bound parameter, never formatted into SQL. Documents, pending
changes, failures and runs are kept per generation (`index`, `<collection>__<fingerprint>`).

`TrackingStore` opens the database and holds the leases; each table's reads and writes are a
mixin of their own: `document_records` (landed documents, pending changes), `failure_records`,
`run_records`, `generation_records`, `provider_batches`, `index_builds` and `chat_answers`.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import sqlalchemy as sa

from batch_pipeline.config import masked_url
from batch_pipeline.state.tracking.chat_answers import ChatAnswerRecords
from batch_pipeline.state.tracking.document_records import DocumentRecords
from batch_pipeline.state.tracking.failure_records import FailureRecords
from batch_pipeline.state.tracking.generation_records import GenerationRecords
from batch_pipeline.state.tracking.index_builds import IndexBuildRecords
from batch_pipeline.state.tracking.lease import lease
from batch_pipeline.state.tracking.provider_batches import ProviderBatchRecords
from batch_pipeline.state.tracking.run_records import RunRecords
from batch_pipeline.state.tracking.schema import (
    connect,
    create_schema,
)
from batch_pipeline.transient import is_transient


class TrackingUnavailableError(RuntimeError):
    """The tracking database cannot be opened; the message says which and what to set, and
    `transient` whether trying again may help (the server did not answer)."""

    def __init__(self, url: str, error: BaseException) -> None:
        self.transient = is_transient(error)
        try:
            sa.engine.make_url(url)
            shown = masked_url(url)
        except sa.exc.ArgumentError:
            shown = repr(url) if "@" not in url and "?" not in url else "(an unparsable URL)"
        cause = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        super().__init__(
            f"cannot open the tracking store at {shown}: {type(error).__name__}: {cause}; "
            "set BATCH_PIPELINE_TRACKING_URL to a reachable SQLAlchemy URL "
            "(or unset it to use SQLite under --home)"
        )


class TrackingStore(
    DocumentRecords,
    FailureRecords,
    RunRecords,
    GenerationRecords,
    ProviderBatchRecords,
    IndexBuildRecords,
    ChatAnswerRecords,
):
    """Document, failure, run and generation records for every collection."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = connect(url)
            create_schema(self.engine)
        except (sa.exc.SQLAlchemyError, ImportError) as error:
            raise TrackingUnavailableError(url, error) from None

    def dispose(self) -> None:
        self.engine.dispose()

    def landing_lease(self, index: str, owner: str, **timing: float) -> AbstractContextManager:
        """Hold generation `index`'s landing lease: one run lands into it at a time."""
        return lease(self.engine, index, owner, **timing)

    def partition_lease(
        self,
        partition: str,
        owner: str,
        on_wait: Callable[[str], None] | None = None,
        wait_seconds: float = 24 * 3600,
    ) -> AbstractContextManager:
        """Hold a partition's run lease: one run goes through its stages at a time; a second
        waits (hearing who holds it through `on_wait`) and then finds only what is still
        stale, instead of embedding the same documents twice."""
        return lease(
            self.engine, f"partition:{partition}", owner, wait_seconds=wait_seconds, on_wait=on_wait
        )
