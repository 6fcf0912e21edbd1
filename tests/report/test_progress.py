from __future__ import annotations

import io
import re

from tests.report_helpers import result
from preflight.config import Instance, Threshold
from preflight.report.progress import LOG_TICK_S, Progress, expected_s

# storage judging seq_read only: its 3 read parts share 5 s (no writes), after its stated 1.5 s start-up
INSTANCE = Instance("storage", "storage", {}, (Threshold("seq_read", 1.0, None, "fail", "t.yaml:4:5"),), 120.0, 5.0,
                    True, "t.yaml:3:3")


class LongCheck:
    """A fake clock and a fake wait: each wait passes ``seconds`` at once; the check ends after ``ticks`` of them."""

    def __init__(self, ticks: int) -> None:
        self.now, self.left = 1000.0, ticks

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        if not self.left:
            return True
        self.now += seconds
        self.left -= 1
        return False


def test_the_expected_wall_time_is_what_duration_buys_plus_the_checks_start_up():
    assert expected_s(INSTANCE) == 5.0 + 1.5
    writes = INSTANCE._replace(thresholds=(*INSTANCE.thresholds, Threshold("seq_write", 1.0, None, "fail", "t:5:5")))
    assert expected_s(writes) == 5.0 + 1.5  # one more part shares the same duration
    assert expected_s(INSTANCE._replace(duration_s=1.0)) == 3 * 1.0 + 1.5  # 1 s per part at least
    assert expected_s(INSTANCE._replace(repeats=3)) == 3 * 6.5


def test_terminal_progress_redraws_one_line_with_elapsed_of_expected_and_timeout_then_the_outcome():
    stream = io.StringIO()
    progress = Progress(stream, live=True, clock=lambda: 1000.0)  # no time passes, however busy the machine
    progress(INSTANCE, None)
    progress(INSTANCE, [result("seq_read", "fail"), result("x", "pass")])
    text = stream.getvalue()
    assert text.startswith("\r\033[K  storage: 0s of ~6.5s expected, 120s timeout")
    assert text.endswith("\r\033[K  storage: done in 0.0s: 1 fail, 1 pass\n")


def test_log_progress_says_the_expected_time_before_the_check_starts_and_ends_with_one_line():
    stream = io.StringIO()
    progress = Progress(stream, clock=lambda: 1000.0)  # a StringIO is no terminal; no time passes
    progress(INSTANCE, None)
    progress(INSTANCE, [])
    progress.close()
    assert stream.getvalue() == "  running storage (expect ~6.5s, timeout 120s) ...\n  storage: done in 0.0s\n"


def test_a_log_gets_a_line_at_least_every_10_s_while_a_long_check_runs():
    check = LongCheck(ticks=24)  # runs 24 x LOG_TICK_S = 2 minutes on the fake clock
    stream = io.StringIO()
    progress = Progress(stream, live=False, clock=check.clock, wait=check.wait)
    progress(INSTANCE, None)
    progress(INSTANCE, [result("seq_read", "pass")])
    lines = stream.getvalue().splitlines()
    assert lines[0] == "  running storage (expect ~6.5s, timeout 120s) ..."
    assert lines[-1] == "  storage: done in 120.0s: 1 pass"
    ticks = lines[1:-1]
    assert len(ticks) == 24 and ticks[0] == "  storage: still running after 5s (expected ~6.5s, timeout 120s)"
    seen = [0.0] + [float(re.search(r"after (\d+)s", line).group(1)) for line in ticks] + [120.0]
    assert max(b - a for a, b in zip(seen, seen[1:])) <= 10 and LOG_TICK_S <= 10


class ScanningCheck(LongCheck):
    """A long check that reports its own progress (a scan: all) after its first tick."""

    def __init__(self, ticks: int, progress: Progress) -> None:
        super().__init__(ticks)
        self.progress = progress

    def wait(self, seconds: float) -> bool:
        ended = super().wait(seconds)
        self.progress.said(f"scan: {int(self.now - 1000) * 100:,} of 5,000 files, 80 files/s, ~20 s left")
        return ended


def test_a_checks_own_progress_is_the_logs_line_while_it_runs():
    """Issue 43 case 3: scan: all says how far it got (files, bytes, rate, time left) on stderr as it goes."""
    stream = io.StringIO()
    progress = Progress(stream, live=False)
    check = ScanningCheck(ticks=3, progress=progress)
    progress.clock, progress._wait = check.clock, check.wait
    progress(INSTANCE, None)
    progress(INSTANCE, [result("unreadable_files", "pass")])
    lines = stream.getvalue().splitlines()
    assert lines[1:4] == ["  storage: scan: 500 of 5,000 files, 80 files/s, ~20 s left",
                          "  storage: scan: 1,000 of 5,000 files, 80 files/s, ~20 s left",
                          "  storage: scan: 1,500 of 5,000 files, 80 files/s, ~20 s left"], lines
