"""The indexes a generation's table carries (a collection's `index:` settings): an ANN index
on its vectors once it holds `vector.min_rows` rows, and LanceDB's native full-text (BM25)
index on each of `full_text.columns`. Every land keeps them current, and the
`indexes_current` check proves it.

- **Upkeep** (`TableIndexes.keep_current`) runs after a land's commit, under the landing
  lease:
  - a missing or damaged index is built;
  - the ANN index is rebuilt (retrained) once the table holds `vector.rebuild_growth` times
    the rows it was trained on (the tracking store keeps that count), and the reason is logged;
  - otherwise the new rows are folded into every index incrementally (LanceDB's `optimize`,
    which also compacts small files and prunes versions older than the maintenance retention).

  A build that fails leaves the land committed: the upkeep reports the index and the error,
  and the check fails naming it until a later land builds it.
- **Health** (`TableIndexes.states`): each index the settings expect, whether it is there,
  its indexed and unindexed rows (LanceDB's `index_stats`), and what is wrong with it.

A query never waits for upkeep. LanceDB commits a rebuilt index as a new table version, so a
reader keeps the version it opened until the rebuild is committed.
"""

import time
import warnings
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from batch_pipeline.config import IndexConfig
from batch_pipeline.state.tracking import TrackingStore

VECTOR_COLUMN = "vector"
VECTOR_INDEX = "vector_idx"
VECTOR, FULL_TEXT = "vector", "full_text"
AUTO_TYPE = "IVF_HNSW_SQ"  # what `type: auto` builds (docs/search.md: measured)
DISTANCE = "cosine"  # the models' vectors are compared by angle


def full_text_index(column: str) -> str:
    return f"{column}_idx"


@dataclass(frozen=True)
class IndexSpec:
    name: str
    column: str
    kind: str  # vector or full_text


@dataclass(frozen=True)
class IndexState:
    """One index the settings expect on a table, as it stands."""

    name: str
    column: str
    kind: str
    present: bool
    indexed_rows: int = 0
    unindexed_rows: int = 0
    index_type: str | None = None
    problem: str | None = None  # missing, damaged, too many unindexed rows; None: current

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "column": self.column,
            "kind": self.kind,
            "present": self.present,
            "type": self.index_type,
            "indexed_rows": self.indexed_rows,
            "unindexed_rows": self.unindexed_rows,
            "problem": self.problem,
        }


@dataclass
class IndexUpkeep:
    """What a land's upkeep did to a table's indexes."""

    built: dict[str, str] = field(default_factory=dict)  # index -> why it was (re)built
    failed: dict[str, str] = field(default_factory=dict)  # index -> why its build failed
    folded: bool = False  # new rows folded into the existing indexes
    seconds: float = 0.0

    def metadata(self) -> dict[str, object]:
        return {
            "indexes_built": len(self.built),
            "indexes_failed": len(self.failed),
            "index_upkeep_seconds": round(self.seconds, 3),
        }


class TableIndexes:
    """The indexes of one table (a generation's, or its question rows') under `settings`."""

    def __init__(
        self,
        table,  # noqa: ANN001 - a LanceDB table
        table_name: str,
        settings: IndexConfig,
        tracking: TrackingStore,
        retention: timedelta = timedelta(days=7),
    ) -> None:
        self.table = table
        self.table_name = table_name
        self.settings = settings
        self.tracking = tracking
        self.retention = retention

    @property
    def vector_type(self) -> str | None:
        chosen = self.settings.vector.type
        return None if chosen == "off" else AUTO_TYPE if chosen == "auto" else chosen

    def expected(self, rows: int | None = None) -> list[IndexSpec]:
        """The indexes this table should have now (the ANN index from `min_rows` rows on)."""
        rows = self.table.count_rows() if rows is None else rows
        columns = set(self.table.schema.names)
        specs = []
        if self.vector_type is not None and rows >= self.settings.vector.min_rows:
            specs.append(IndexSpec(VECTOR_INDEX, VECTOR_COLUMN, VECTOR))
        if self.settings.full_text.enabled:
            specs += [
                IndexSpec(full_text_index(column), column, FULL_TEXT)
                for column in self.settings.full_text.columns
                if column in columns
            ]
        return specs

    # ------------------------------------------------------------------ health

    def states(self) -> list[IndexState]:
        """Each expected index as it stands (see the module docstring)."""
        present = {index.name: index for index in self.table.list_indices()}
        bound = self.settings.max_unindexed_rows
        found = []
        for spec in self.expected():
            if spec.name not in present:
                found.append(
                    IndexState(spec.name, spec.column, spec.kind, False, problem="missing")
                )
                continue
            try:
                stats = self.table.index_stats(spec.name)
                self._probe(spec)
            except Exception as error:  # noqa: BLE001 - any failure to read it is damage
                found.append(
                    IndexState(
                        spec.name, spec.column, spec.kind, True, problem=f"damaged: {_short(error)}"
                    )
                )
                continue
            problem = None
            if stats.num_unindexed_rows > bound:
                problem = (
                    f"{stats.num_unindexed_rows:,} rows not indexed, over "
                    f"max_unindexed_rows {bound:,}"
                )
            found.append(
                IndexState(
                    spec.name,
                    spec.column,
                    spec.kind,
                    True,
                    stats.num_indexed_rows,
                    stats.num_unindexed_rows,
                    str(stats.index_type),
                    problem,
                )
            )
        return found

    def _probe(self, spec: IndexSpec) -> None:
        """One query through the index: a damaged file fails here, not in a reader's query."""
        if spec.kind == VECTOR:
            dim = self.table.schema.field(VECTOR_COLUMN).type.list_size
            probe = np.zeros(dim, dtype=np.float32)
            probe[0] = 1.0
            self.table.search(probe).metric(DISTANCE).limit(1).select(
                ["chunk_id", "_distance"]
            ).to_list()
        else:
            query = self.table.search("probe", query_type="fts", fts_columns=spec.column)
            query.limit(1).select(["chunk_id", "_score"]).to_list()

    # ------------------------------------------------------------------ upkeep

    def keep_current(self) -> IndexUpkeep:
        """Build what is missing or damaged, retrain what the table outgrew, fold new rows
        into the rest (see the module docstring)."""
        started = time.perf_counter()
        upkeep = IndexUpkeep()
        rows = self.table.count_rows()
        builds = self.tracking.index_builds(self.table_name)
        states = {state.name: state for state in self.states()}
        for spec in self.expected(rows):
            state = states.get(spec.name)
            reason = None
            if state is None or not state.present:
                reason = "missing"
            elif state.problem is not None and state.problem.startswith("damaged"):
                reason = state.problem
            elif spec.kind == VECTOR:
                trained = builds.get(spec.name)
                growth = self.settings.vector.rebuild_growth
                if trained is None:
                    reason = None  # built before its rows were recorded: folded, not retrained
                elif trained.rows and rows >= trained.rows * growth:
                    reason = (
                        f"the table grew from {trained.rows:,} rows at training to {rows:,} "
                        f"({rows / trained.rows:.2f}x, rebuild_growth {growth})"
                    )
            if reason is not None:
                self._build(spec, rows, reason, upkeep)
        behind = [
            state
            for name, state in states.items()
            if state.present and state.unindexed_rows and name not in upkeep.built
        ]
        if behind:
            with warnings.catch_warnings():  # a retention of 0 is a deliberate setting here
                warnings.simplefilter("ignore", UserWarning)
                self.table.optimize(cleanup_older_than=self.retention)
            upkeep.folded = True
        upkeep.seconds = time.perf_counter() - started
        return upkeep

    def _build(self, spec: IndexSpec, rows: int, reason: str, upkeep: IndexUpkeep) -> None:
        began = time.perf_counter()
        try:
            self.table.create_index(
                spec.column, config=self._config(spec), replace=True, name=spec.name
            )
        except Exception as error:  # noqa: BLE001 - the land stands; the check names it
            upkeep.failed[spec.name] = _short(error)
            return
        seconds = time.perf_counter() - began
        self.tracking.record_index_build(self.table_name, spec.name, rows, reason, seconds)
        upkeep.built[spec.name] = reason

    def _config(self, spec: IndexSpec):  # noqa: ANN202 - a lancedb.index config
        from lancedb.index import FTS, HnswSq, IvfFlat, IvfPq, IvfSq

        if spec.kind == FULL_TEXT:
            return FTS(**self.settings.full_text.tokenizer())
        kinds = {"IVF_PQ": IvfPq, "IVF_HNSW_SQ": HnswSq, "IVF_SQ": IvfSq, "IVF_FLAT": IvfFlat}
        return kinds[self.vector_type](distance_type=DISTANCE)


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"{type(error).__name__}: {text[:300]}"


@dataclass(frozen=True)
class IndexHealth:
    """The indexes of tables as a land left them, and what is wrong with them: what an
    `indexes_current` check reads (`vector_index`'s for the generation's chunks,
    `question_rows`' for the question rows each lands)."""

    states: dict[str, list[IndexState]]  # table -> its expected indexes
    failed: dict[str, str] = field(default_factory=dict)  # index -> why this land's build failed

    @property
    def problems(self) -> list[str]:
        found = [f"{name}: build failed: {why}" for name, why in sorted(self.failed.items())]
        for table, states in self.states.items():
            found += [f"{table}.{s.name}: {s.problem}" for s in states if s.problem is not None]
        return found

    @property
    def ok(self) -> bool:
        return not self.problems

    def with_(self, other: "IndexHealth") -> "IndexHealth":
        """This health and `other`'s, of other tables, as one."""
        return IndexHealth(self.states | other.states, self.failed | other.failed)

    def metadata(self) -> dict[str, object]:
        states = [s for found in self.states.values() for s in found]
        return {
            "indexes": len(states),
            "unindexed_rows": sum(s.unindexed_rows for s in states),
            "problems": "; ".join(self.problems) or "none",
            **{
                f"{table}.{s.name}": f"{s.index_type or s.kind}, {s.indexed_rows:,} rows indexed, "
                f"{s.unindexed_rows:,} not"
                for table, found in self.states.items()
                for s in found
                if s.present
            },
        }
