"""Progress of a long stage: done of total, rate, ETA, reported at a steady pace.

`Progress` is told what was done (`advance`) and hands a `ProgressUpdate` to its sink at most
every `interval` seconds, and once at the end, so a backfill of a million inputs reports
steadily without flooding a log. The rate and the ETA count from when the work began
(`working`, after the model loaded and calibrated), so a line's tokens/s is the throughput;
"done in" counts from the start, load included. The sinks: the Dagster event log (the
assets), a progress bar or plain lines (the CLI). The clock is injected so the pacing can be
tested without waiting.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass


def duration(seconds: float) -> str:
    """`1h 02m`, `3m 07s`, `12s`."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


@dataclass(frozen=True)
class ProgressUpdate:
    stage: str
    unit: str  # what is counted: "inputs", "documents"
    done: int
    total: int
    tokens: int
    elapsed: float
    finished: bool = False
    total_tokens: int = 0  # the tokens of all the work, where the stage knows them
    working: float | None = None  # seconds of work: since it began, setup set aside (None: elapsed)
    token_unit: str = "tokens"  # what `tokens` counts: "prompt tokens" for a chat model
    # (seconds, done, tokens) since the first piece of work finished: the pace once the
    # pipeline is full (None: nothing finished yet)
    since_first: tuple[float, int, int] | None = None

    @property
    def busy(self) -> float:
        """The seconds the rate is counted over: since the work began, setup left out."""
        return self.elapsed if self.working is None else self.working

    @property
    def rate(self) -> float:
        return self.done / self.busy if self.busy > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.busy if self.busy > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the pace so far; None before anything is done. From the tokens
        left where the stage knows its tokens: execute takes its inputs shortest first, so
        the inputs left are the long ones, and a count of inputs would promise too soon.

        The pace is counted from when the first piece finished: an engine that works on
        many requests at once (vLLM) finishes its first only after a whole wave of them, and
        counting that wait in would promise far too late (a briefs run said "1/100 prompts,
        ETA 1h 06m" where 3m 20s followed). With only the first piece finished there is no
        such pace yet: None. (An update made without `since_first` goes by the whole run.)"""
        if self.finished or self.done >= self.total:
            return 0.0
        if self.since_first is None:
            seconds, done, tokens = self.busy, self.done, self.tokens
        else:
            seconds, done, tokens = self.since_first
            if done <= 0 or seconds <= 0:
                return None
        if self.total_tokens and self.tokens:
            left = max(0, self.total_tokens - self.tokens)
            return left * seconds / tokens if tokens > 0 and seconds > 0 else None
        return (self.total - self.done) * seconds / done if done > 0 and seconds > 0 else None

    def line(self) -> str:
        """`execute: 12,000/1,000,000 inputs (1.2%), 3,400 tokens/s, ETA 2h 13m`."""
        if not self.done and not self.finished:
            return f"{self.stage}: {self.total:,} {self.unit} to do"
        share = self.done / self.total * 100 if self.total else 100.0
        parts = [f"{self.stage}: {self.done:,}/{self.total:,} {self.unit} ({share:.1f}%)"]
        if self.tokens:
            parts.append(f"{self.tokens_per_second:,.0f} {self.token_unit}/s")
        else:
            parts.append(f"{self.rate:,.1f} {self.unit}/s")
        if self.finished:
            parts.append(f"done in {duration(self.elapsed)}")
        else:
            eta = self.eta_seconds
            parts.append(f"ETA {duration(eta)}" if eta is not None else "ETA unknown")
        return ", ".join(parts)


ProgressSink = Callable[[ProgressUpdate], None]


class Progress:
    """Counts work done and, once `start`ed, reports it to `sink` every `interval` seconds
    and at the end. (A stage that may find nothing to do starts it at its first real work,
    so a no-op run reports nothing.)"""

    def __init__(
        self,
        stage: str,
        total: int,
        sink: ProgressSink | None,
        unit: str = "inputs",
        interval: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
        total_tokens: int = 0,
        token_unit: str = "tokens",
    ) -> None:
        self.stage = stage
        self.total = total
        self.total_tokens = total_tokens
        self.token_unit = token_unit
        self.sink = sink
        self.unit = unit
        self.interval = interval
        self.clock = clock
        self.done = 0
        self.tokens = 0
        self._started = clock()
        self._working: float | None = None
        self._set_aside = 0.0  # setup seconds inside the work (an engine started lazily)
        self._last = self._started
        self._reporting = False
        self._first: tuple[float, int, int] | None = None  # when the first piece finished

    def update(self, finished: bool = False) -> ProgressUpdate:
        now = self.clock()
        return ProgressUpdate(
            self.stage,
            self.unit,
            self.done,
            self.total,
            self.tokens,
            now - self._started,
            finished,
            self.total_tokens,
            self._busy(now),
            self.token_unit,
            None
            if self._first is None
            else (now - self._first[0], self.done - self._first[1], self.tokens - self._first[2]),
        )

    def _busy(self, now: float) -> float | None:
        if self._working is None and not self._set_aside:
            return None  # no setup was named: the rate counts from the start
        began = self._started if self._working is None else self._working
        return max(0.0, now - began - self._set_aside)

    def working(self) -> None:
        """The setup is over (a model loaded, a path calibrated): the rate counts from now."""
        self._working = self.clock()

    def set_aside(self, seconds: float) -> None:
        """Setup that happened during the work (an engine that starts on its first call):
        left out of the rate, as the setup before `working` is."""
        self._set_aside += seconds

    def start(self) -> None:
        """Report the start, so a long stage shows at once what lies ahead."""
        self._reporting = self.sink is not None
        if self.sink is not None:
            self.sink(self.update())

    def advance(self, done: int, tokens: int = 0) -> None:
        self.done += done
        self.tokens += tokens
        now = self.clock()
        if self._first is None and self.done:
            self._first = (now, self.done, self.tokens)
        # all done: `finish` reports it, once (a line here too would say the same twice)
        if self._reporting and now - self._last >= self.interval and self.done < self.total:
            self._last = now
            self.sink(self.update())

    def finish(self) -> None:
        if self._reporting:
            self.sink(self.update(finished=True))  # type: ignore[misc]
