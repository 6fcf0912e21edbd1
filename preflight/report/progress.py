"""Progress on stderr: which check is running, how long it is expected to take, and its elapsed time.

Each check's start says the wall time its configuration predicts (``checks.base.Timing``: the
measuring time ``duration`` buys plus the check's fixed start-up) beside its timeout. On a
terminal one line is then redrawn every second (``storage: 3s of ~4.5s expected, 120s timeout``)
and replaced by the check's outcome when it ends; elsewhere (CI logs, pods) a line is appended
every ``LOG_TICK_S`` while the check runs, so a log never stays silent for more than that and a
reader can tell a slow check from a hung job, and one at the end; stdout keeps only the report.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence, TextIO

from preflight.checks import CHECKS
from preflight.checks.base import timing
from preflight.config import Instance
from preflight.verdict import Result

TICK_S = 1.0  # a terminal's redraw
LOG_TICK_S = 5.0  # a log's "still running" line: well inside the 10 s a CI log may stay silent (issue 25)


class Progress:
    """The runner's progress callback: ``progress(instance, None)`` on start, ``(instance, results)`` at the end.

    ``clock`` and ``wait`` (``wait(seconds)`` returns True once the check has ended) are the tests' seam:
    a fake pair runs a long check's ticks without waiting for them.
    """

    def __init__(self, stream: TextIO, live: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._ticker: threading.Thread | None = None
        self._started = 0.0
        self._detail = ""  # the last progress line the running check reported (``said``)

    def __call__(self, instance: Instance, results: Sequence[Result] | None) -> None:
        if results is None:
            self._begin(instance)
        else:
            self._end(instance, results)

    def said(self, line: str) -> None:
        """The running check's own progress ("12,345 of 1,000,000 files read, ..."): on a terminal it replaces the
        status line's clock, in a log it is the next tick's line."""
        self._detail = line

    def close(self) -> None:
        """Stop the ticker (after an interruption the runner may not call the end)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
            if self.live:
                self.stream.write("\r\033[K")
                self.stream.flush()

    def _begin(self, instance: Instance) -> None:
        self._started = self.clock()
        self._detail = ""
        expected = expected_s(instance)
        if not self.live:
            print(f"  running {instance.name} (expect ~{expected:.1f}s, timeout {instance.timeout_s:g}s) ...",
                  file=self.stream, flush=True)
        self._stop.clear()
        self._ticker = threading.Thread(target=self._tick, args=(instance, expected), daemon=True)
        self._ticker.start()

    def _tick(self, instance: Instance, expected: float) -> None:
        if not self.live:
            while not self._wait(LOG_TICK_S):
                elapsed = self.clock() - self._started
                print(f"  {instance.name}: " + (self._detail or f"still running after {elapsed:.0f}s (expected "
                      f"~{expected:.1f}s, timeout {instance.timeout_s:g}s)"), file=self.stream, flush=True)
            return
        while True:
            elapsed = self.clock() - self._started
            self.stream.write(f"\r\033[K  {instance.name}: " + (self._detail or f"{elapsed:.0f}s of ~{expected:.1f}s "
                              f"expected, {instance.timeout_s:g}s timeout"))
            self.stream.flush()
            if self._wait(TICK_S):
                return

    def _end(self, instance: Instance, results: Sequence[Result]) -> None:
        self.close()
        elapsed = self.clock() - self._started
        verdicts = [r.verdict for r in results]
        tally = ", ".join(f"{verdicts.count(v)} {v}" for v in ("fail", "error", "warn", "pass", "skip")
                          if v in verdicts)
        print(f"  {instance.name}: done in {elapsed:.1f}s{': ' + tally if tally else ''}", file=self.stream,
              flush=True)


def expected_s(instance: Instance) -> float:
    """The wall time ``instance``'s configuration predicts: what its ``duration`` buys plus the check's start-up,
    times its ``repeats`` (a retry, which only a near miss earns, is not counted)."""
    return timing(CHECKS[instance.check], instance.options, instance.budget).expected_s * instance.repeats
