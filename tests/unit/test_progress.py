"""A long stage reports its progress at a steady pace (a fake clock, no waiting)."""

from batch_pipeline.measures.progress import Progress, ProgressUpdate, duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_reports_at_its_interval_and_at_the_end():
    clock, seen = FakeClock(), []
    progress = Progress("execute", 1000, seen.append, interval=30, clock=clock)
    progress.start()
    for _ in range(100):  # 10 inputs and 500 tokens per second for 100 s
        clock.now += 1
        progress.advance(10, tokens=500)
    progress.finish()
    assert [u.done for u in seen] == [0, 300, 600, 900, 1000]
    assert seen[-1].finished and not seen[-2].finished
    assert seen[1].tokens_per_second == 500 and seen[1].eta_seconds == 70
    assert seen[1].line() == "execute: 300/1,000 inputs (30.0%), 500 tokens/s, ETA 1m 10s"
    assert seen[0].line() == "execute: 1,000 inputs to do"
    assert seen[-1].line().endswith("done in 1m 40s")


def test_setup_during_the_work_is_set_aside_from_the_rate():
    """An engine that starts on its first call (vLLM): its start is left out of the rate."""
    clock, seen = FakeClock(), []
    progress = Progress("execute", 100, seen.append, interval=0, clock=clock)
    progress.start()
    progress.working()
    clock.now += 40  # the first call: 30 s starting the engine, 10 s generating
    progress.set_aside(30)
    progress.advance(50, tokens=500)
    assert (seen[-1].busy, seen[-1].elapsed, seen[-1].tokens_per_second) == (10, 40, 50)


def test_the_end_is_reported_once():
    """The advance that completes the work leaves the report to `finish`: a log did show
    "100/100 prompts (100.0%), ..., ETA 0s" and then the same with "done in"."""
    clock, seen = FakeClock(), []
    progress = Progress("execute", 100, seen.append, interval=0, clock=clock)
    progress.start()
    for _ in range(2):
        clock.now += 1
        progress.advance(50, tokens=500)
    progress.finish()
    assert [(u.done, u.finished) for u in seen] == [(0, False), (50, False), (100, True)]


def test_the_eta_is_reckoned_in_the_tokens_left_when_the_stage_knows_them():
    """Inputs come shortest first: after half the inputs, far less than half the tokens are
    done, and the ETA says so (an ETA by inputs said 20 s where 50 s more followed)."""
    clock, seen = FakeClock(), []
    # 100 inputs: the first 50 of 10 tokens each, the last 50 of 90 (5,000 tokens in all)
    progress = Progress("execute", 100, seen.append, interval=10, clock=clock, total_tokens=5000)
    progress.start()
    for _ in range(5):  # 50 short inputs in 10 s: 500 tokens, 50 tokens/s
        clock.now += 2
        progress.advance(10, tokens=100)
    update = seen[-1]
    assert (update.done, update.tokens) == (50, 500)
    assert update.eta_seconds == 90  # 4,500 tokens left at 50 tokens/s, not 50 inputs at 5/s
    assert update.line().endswith("ETA 1m 30s")


def test_the_rate_counts_from_when_the_work_began_and_done_in_from_the_start():
    """A model that takes 60 s to load and calibrate does not make 500 tokens/s read as 125:
    the line is the throughput, and "done in" is the whole stage."""
    clock, seen = FakeClock(), []
    progress = Progress("execute", 200, seen.append, interval=10, clock=clock, total_tokens=10_000)
    progress.start()
    clock.now += 60  # the model loads and calibrates
    progress.working()
    for _ in range(20):  # 10 inputs and 500 tokens per second for 20 s
        clock.now += 1
        progress.advance(10, tokens=500)
    progress.finish()
    first, last = seen[1], seen[-1]  # after the first second of work
    assert (first.elapsed, first.busy, first.done) == (61, 1, 10)
    assert (first.tokens_per_second, first.rate) == (500, 10)
    assert first.eta_seconds is None  # one piece done: no pace since the first yet
    assert seen[2].eta_seconds == 9  # 4,500 tokens left at 500 tokens/s since the first
    assert last.line() == "execute: 200/200 inputs (100.0%), 500 tokens/s, done in 1m 20s"


def test_without_tokens_the_line_gives_the_rate_and_an_unknown_eta_before_any_work():
    update = ProgressUpdate("prepare", "documents", 50, 200, 0, 10.0)
    assert update.line() == "prepare: 50/200 documents (25.0%), 5.0 documents/s, ETA 30s"
    stalled = ProgressUpdate("prepare", "documents", 0, 200, 0, 10.0, finished=False)
    assert stalled.eta_seconds is None


def test_nothing_is_reported_before_the_start():
    seen = []
    progress = Progress("prepare", 10, seen.append, interval=0)
    progress.advance(5)
    progress.finish()
    assert seen == []


def test_no_sink_means_no_reports():
    progress = Progress("execute", 10, None, interval=0)
    progress.start()
    progress.advance(10)
    progress.finish()  # nothing to call; must not fail
    assert progress.done == 10


def test_durations_read_as_a_person_would_say_them():
    assert [duration(s) for s in (7, 187, 3725, 86400)] == ["7s", "3m 07s", "1h 02m", "24h 00m"]


def test_the_eta_counts_the_pace_from_the_first_finished_piece():
    """vLLM works on a wave of requests at once: the first finishes only after 30 s, then one
    a second. Counting the wait in, the ETA said 188 s where 79 followed."""
    clock, seen = FakeClock(), []
    progress = Progress("execute", 100, seen.append, interval=0, clock=clock, unit="prompts")
    progress.start()
    progress.working()
    clock.now += 30
    progress.advance(1, tokens=10)
    # one finished: its time is the wait for the wave, no pace to go by (it said 99 x 30 s)
    assert seen[-1].eta_seconds is None
    assert seen[-1].line() == "execute: 1/100 prompts (1.0%), 0 tokens/s, ETA unknown"
    for _ in range(20):
        clock.now += 1
        progress.advance(1, tokens=10)
    assert seen[-1].done == 21 and seen[-1].eta_seconds == 79
    assert seen[-1].tokens_per_second == 210 / 50  # the rate shown is the run's so far
