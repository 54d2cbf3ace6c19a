"""Weights a checkpoint lacks are an error, for every model the project loads.

transformers fills a tensor the checkpoint does not hold with fresh random values and says
so only in its load report (`... LOAD REPORT`, a `MISSING` row per tensor, logged at
WARNING). A model loaded so computes something in each process, differently each time: an
encoder's checkpoint under a cross-encoder's config scored the same pairs 0.503 in one
process and 0.478 in another. `every_weight_loaded` reads that report while a model loads
and raises `MissingWeightsError`, naming the folder and the tensors, instead.
"""

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MISSING_ROW = re.compile(r"^\s*(\S+)\s*\|\s*MISSING\s*\|", re.MULTILINE)


class MissingWeightsError(RuntimeError):
    """A model folder whose weights lack tensors the model needs; the message names them."""


class _LoadReports(logging.Handler):
    """Collects the tensors transformers' load reports list as MISSING."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.missing: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = _ANSI.sub("", record.getMessage())
        if "LOAD REPORT" in message:
            self.missing += _MISSING_ROW.findall(message)


@contextmanager
def every_weight_loaded(folder: str | Path, what: str) -> Iterator[None]:
    """Load a model inside: MissingWeightsError when its weights lacked any tensor (read from
    transformers' load report, which this makes sure is logged however verbose it was set)."""
    library = logging.getLogger("transformers")
    reports = _LoadReports()
    level = library.level
    library.addHandler(reports)
    if level > logging.WARNING or level == logging.NOTSET:
        library.setLevel(logging.WARNING)
    try:
        yield
    finally:
        library.removeHandler(reports)
        library.setLevel(level)
    if reports.missing:
        shown = ", ".join(reports.missing[:5]) + (" ..." if len(reports.missing) > 5 else "")
        raise MissingWeightsError(
            f"{what} {folder}: its weights lack {len(reports.missing)} tensors the model needs "
            f"({shown}): an incomplete download, a damaged file, or another model's checkpoint. "
            "Loaded so, they would be drawn at random in each process"
        )
