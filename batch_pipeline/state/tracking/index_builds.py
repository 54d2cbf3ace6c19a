"""The tracking store's record of the indexes lands built on tables (SQL only; the index's
upkeep in `batch_pipeline.state.table_indexes` decides when to build)."""

import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import index_builds


@dataclass(frozen=True)
class IndexBuild:
    """An index as it was last built on a table."""

    table_name: str
    index_name: str
    rows: int  # the table's rows when it was built (what the index was trained on)
    built_at: float
    reason: str
    seconds: float


class IndexBuildRecords:
    """Reads and writes the `index_builds` table. Mixed into TrackingStore."""

    engine: Engine

    def record_index_build(
        self, table_name: str, index_name: str, rows: int, reason: str, seconds: float
    ) -> None:
        row = {"rows": rows, "built_at": time.time(), "reason": reason, "seconds": seconds}
        key = (index_builds.c.table_name == table_name) & (index_builds.c.index_name == index_name)
        with self.engine.begin() as conn:
            if conn.execute(sa.update(index_builds).where(key).values(**row)).rowcount == 0:
                conn.execute(
                    sa.insert(index_builds).values(
                        table_name=table_name, index_name=index_name, **row
                    )
                )

    def index_builds(self, table_name: str) -> dict[str, IndexBuild]:
        """The table's indexes as last built, by index name."""
        query = sa.select(index_builds).where(index_builds.c.table_name == table_name)
        with self.engine.connect() as conn:
            return {row.index_name: IndexBuild(**row._mapping) for row in conn.execute(query)}
