"""Resident memory of this process, as the benchmarks report it: now, the high-water mark,
and the peak of one block of work (`PeakRss`).

On Linux the kernel keeps the high-water mark (VmHWM) and lets a process reset it to its
current RSS (`/proc/self/clear_refs`, value 5, since Linux 4.0), so a block's peak is exact
and costs nothing while the block runs. Elsewhere, or where the reset is refused, a thread
samples the RSS every `interval` seconds instead; that misses peaks shorter than the
interval, and its wake-ups share the cores with the measured work (on a 2-core Zen 4, the
benchmark's OpenVINO bf16 path with a 10 ms sampler beside it took a median 1.06 and 1.01
times as long per pass as without, in two runs of 9 alternated passes: within that host's
noise, but not free).
"""

import os
import resource
import threading
from pathlib import Path

STATUS = Path("/proc/self/status")
STATM = Path("/proc/self/statm")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_HIGH_WATER = "5"  # clear_refs: reset VmHWM to the current RSS


def rss_bytes() -> int:
    """This process's resident memory now (0 where the system does not say)."""
    try:
        return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def high_water_bytes() -> int:
    """This process's peak resident memory: since exec or since the last reset (VmHWM), or,
    where the kernel does not say, the process's maximum as `getrusage` reports it."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_high_water() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        CLEAR_REFS.write_text(RESET_HIGH_WATER)
    except OSError:
        return False
    return True


class PeakRss:
    """The highest RSS of this process while the block runs, in bytes (`.peak`): kept by the
    kernel where it can be reset, else sampled every `interval` seconds on a thread."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.peak = 0
        self.sampled = False  # True where a thread sampled it (the kernel could not keep it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "PeakRss":
        self.peak = rss_bytes()
        if not _reset_high_water():
            self.sampled = True
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *_) -> None:  # noqa: ANN002
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        else:
            self.peak = max(self.peak, high_water_bytes())
        self.peak = max(self.peak, rss_bytes())
