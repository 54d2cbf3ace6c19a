"""Crash injection for the resume tests (FAKE faults: never set in production).

`BATCH_PIPELINE_CRASH_AT=execute:2` kills the process with SIGKILL right after the second
execute checkpoint is written; `land:commit` right after the first LanceDB commit, before the
tracking store records it. A real SIGKILL: no cleanup code runs, as after an OOM kill or a
preempted node.
"""

import os
import signal

CRASH_ENV = "BATCH_PIPELINE_CRASH_AT"


def crash_point(stage: str, mark: str | int) -> None:
    if os.environ.get(CRASH_ENV) == f"{stage}:{mark}":
        os.kill(os.getpid(), signal.SIGKILL)
