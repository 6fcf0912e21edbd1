"""Progress on stderr: which check is running and its elapsed time against its timeout.

On a terminal one line is redrawn every second (``storage: 12s of 120s``) and replaced by
the check's outcome when it ends; elsewhere (CI logs, pods) one line at the start and one
at the end of each check, so logs stay readable and stdout keeps only the report.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence, TextIO

from preflight.config import Instance
from preflight.verdict import Result

TICK_S = 1.0


class Progress:
    """The runner's progress callback: ``progress(instance, None)`` on start, ``(instance, results)`` at the end."""

    def __init__(self, stream: TextIO, live: bool | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._started = 0.0

    def __call__(self, instance: Instance, results: Sequence[Result] | None) -> None:
        if results is None:
            self._begin(instance)
        else:
            self._end(instance, results)

    def close(self) -> None:
        """Stop the ticker (after an interruption the runner may not call the end)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _begin(self, instance: Instance) -> None:
        self._started = time.monotonic()
        if not self.live:
            print(f"  running {instance.name} (timeout {instance.timeout_s:g}s) ...", file=self.stream, flush=True)
            return
        self._stop.clear()
        self._ticker = threading.Thread(target=self._tick, args=(instance,), daemon=True)
        self._ticker.start()

    def _tick(self, instance: Instance) -> None:
        while True:
            elapsed = time.monotonic() - self._started
            self.stream.write(f"\r\033[K  {instance.name}: {elapsed:.0f}s of {instance.timeout_s:g}s timeout")
            self.stream.flush()
            if self._stop.wait(TICK_S):
                return

    def _end(self, instance: Instance, results: Sequence[Result]) -> None:
        self.close()
        elapsed = time.monotonic() - self._started
        verdicts = [r.verdict for r in results]
        tally = ", ".join(f"{verdicts.count(v)} {v}" for v in ("fail", "error", "warn", "pass", "skip")
                          if v in verdicts)
        print(f"  {instance.name}: done in {elapsed:.1f}s{': ' + tally if tally else ''}", file=self.stream,
              flush=True)
