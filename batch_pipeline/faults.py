"""Crash injection for the resume tests (FAKE faults: never set in production).

`BATCH_PIPELINE_CRASH_AT=execute:2` kills the process with SIGKILL right after the second
execute checkpoint is written; `land:commit` right after the first LanceDB commit, before the
tracking store records it. A real SIGKILL: no cleanup code runs, as after an OOM kill or a
preempted node. `BATCH_PIPELINE_CRASH_SIGNAL=SIGTERM` sends that signal instead (a clean
stop: a scheduler's or an operator's).
"""

import os
import signal

CRASH_ENV = "BATCH_PIPELINE_CRASH_AT"
SIGNAL_ENV = "BATCH_PIPELINE_CRASH_SIGNAL"


def crash_point(stage: str, mark: str | int) -> None:
    if os.environ.get(CRASH_ENV) == f"{stage}:{mark}":
        os.kill(os.getpid(), signal.Signals[os.environ.get(SIGNAL_ENV, "SIGKILL")])
