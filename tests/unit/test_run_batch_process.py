"""`vllm run-batch`'s subprocess, ended as a group: a STAND-IN command (a Python script) that
does what a killed run-batch does to its caller. vLLM's engine-core and workers outlive the
killed run-batch holding its output open; the run must neither wait on them nor leave them
running, and it says what happened in one line."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from batch_pipeline.executors.run_batch import RunBatchError, run_batch_file

ORPHANED = """
import os, signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[1], "w").write(str(child.pid))
print("engine core started", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the run-batch process dies; its engine core lives on
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its parent is gone too
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_killed_run_batch_neither_hangs_the_run_nor_leaves_its_engine_running(tmp_path):
    script, pid_file = tmp_path / "run_batch.py", tmp_path / "engine.pid"
    script.write_text(ORPHANED)
    outcome: dict[str, BaseException] = {}

    def call() -> None:
        try:
            run_batch_file(
                [sys.executable, str(script), str(pid_file)],
                dict(os.environ),
                tmp_path / "results.jsonl",
            )
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome["error"] = error

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(timeout=60)  # the engine core sleeps 300 s: waiting on it would hang
    orphan = int(pid_file.read_text())
    try:
        assert not caller.is_alive(), "the run waited on the killed run-batch's engine core"
        assert not alive(orphan), "the engine core outlived the run"
        error = outcome["error"]
        assert isinstance(error, RunBatchError)
        assert str(error) == (
            "vllm run-batch exited with signal SIGKILL (no error in its output); the next run "
            "resumes from the files it finished"
        )
        assert "\n" not in str(error)
    finally:
        if alive(orphan):
            os.kill(orphan, signal.SIGKILL)


STOPPED_RUN = """
import os, signal, sys
from pathlib import Path
from batch_pipeline.executors.run_batch import run_batch_file

def stop(*args):
    raise SystemExit(143)  # as the CLI's SIGTERM handler raises where the run is

signal.signal(signal.SIGTERM, stop)
folder = Path(sys.argv[1])
run_batch_file([sys.executable, str(folder / "run_batch.py"), str(folder / "engine.pid")],
               dict(os.environ), folder / "results.jsonl")
"""


def test_a_stopped_run_ends_the_run_batch_group_it_started(tmp_path):
    """A run (its own process, as the CLI is) stopped by SIGTERM while run-batch works: the
    run-batch group, engine included, goes with it."""
    (tmp_path / "run_batch.py").write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "open(sys.argv[1], 'w').write(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    pid_file = tmp_path / "engine.pid"
    run = subprocess.Popen(
        [sys.executable, "-c", STOPPED_RUN, str(tmp_path)], cwd=Path(__file__).resolve().parents[2]
    )
    orphan = None
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        orphan = int(pid_file.read_text())
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 143
        deadline = time.monotonic() + 5
        while alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(orphan), "the run's stop left run-batch's engine running"
    finally:
        run.kill()
        if orphan is not None and alive(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_the_line_quoted_is_the_one_that_names_the_error_not_a_shutdown_warning():
    from batch_pipeline.executors.run_batch import telling_line

    traceback = [
        "INFO 12-06 15:29:01 [core.py:93] Initializing a V1 LLM engine",
        "Traceback (most recent call last):",
        '  File "run_batch.py", line 9, in main',
        "ValueError: The decoder prompt (length 9000) is longer than the maximum model length",
        "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: "
        "resource_tracker: There appear to be 1 leaked semaphore objects to clean up",
        "  warnings.warn('resource_tracker: There appear to be %d '",
    ]
    assert telling_line(traceback).startswith("ValueError: The decoder prompt (length 9000)")
    logged = [
        "INFO starting",
        "ERROR 12-06 15:29:13 [core.py:700] EngineCore failed to start.",
        "WARNING 12-06 15:29:14 shutting down",
    ]
    assert telling_line(logged) == "ERROR 12-06 15:29:13 [core.py:700] EngineCore failed to start."
    killed = [
        "INFO 12-06 Added request 3",
        "UserWarning: resource_tracker: leaked semaphore",
        "Triton is installed, but doesn't include CPU backend",
    ]  # a killed run's last
    assert telling_line(killed) == "no error in its output"  # not an unrelated line (round six)
    assert telling_line(["WARNING only warnings"]) == "no error in its output"
    assert telling_line([]) == "no output"
