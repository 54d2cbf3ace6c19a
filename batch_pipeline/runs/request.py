"""What a run of one partition is asked to do (`RunRequest`), what loads its engine, and
what a stage hands on to the next (`StageOutput`)."""

from collections.abc import Callable
from dataclasses import dataclass, field

from batch_pipeline.executors import ExecuteOptions
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.generator import Generator
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.measures.run import MANUAL
from batch_pipeline.state.staging import (
    StagePath,
)


@dataclass(frozen=True)
class StageOutput:
    """What a stage handed on: its file, and its summary."""

    path: StagePath
    summary: object


Engine = Embedder | Generator  # what an executor runs: an embedding model, or a chat model


def no_engine() -> Engine:
    """The loader of a request that must not load a model (a land replayed by hand)."""
    raise RuntimeError("this run was given no engine to load")


@dataclass(frozen=True)
class RunRequest:
    """What a run of one partition was asked to do; every stage reads what concerns it."""

    run_id: str
    load: Callable[[], Engine] = no_engine  # loads the executor's engine, only if there is work
    options: ExecuteOptions = field(default_factory=ExecuteOptions)
    doc_ids: list[str] | None = None  # a targeted run (products that support it)
    trigger: str = MANUAL
    progress: ProgressSink | None = None
    progress_interval: float = 15.0
    allow_mass_delete: bool = False
    started_at: float | None = None  # set by `StagedPartition.run`: when the run began
    retries: int = 0  # steps of the run retried so far (Dagster's step and run retries)


def as_loader(engine: Engine | Callable[[], Engine]) -> Callable[[], Engine]:
    """A loaded engine, or a function that loads one, as a function."""
    return engine if callable(engine) else (lambda: engine)
