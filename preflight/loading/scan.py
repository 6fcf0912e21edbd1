"""``scan: all``: the rest of the run's one pass read to its end, every file once, as the job's first epoch reads it.

The nightly data-integrity run beside the per-job gate: after the check's own windows, one pool of the job's
loader (its workers, batch size, decode) reads what is left of the pass, each file once, its faults counted and
named by the reader (``FileSamples``), for at most the time the check has left; it says how far it got.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

from preflight.checks import base
from preflight.loading.source import Loader
from preflight.units import format_value

PROGRESS_S = 2.0  # between two progress lines


class Scanned(NamedTuple):
    """What the scan read: files handed out, bytes, its seconds, and the files of the pass it did not reach."""

    files: int
    nbytes: int
    seconds: float
    left: int

    def said(self, of: int) -> str:
        """"scan: all read the rest of the 1,347 files: 1,100 in 35.2 s (121 MB, 31 files/s)", or how far it got."""
        rate = f"{format_value(self.nbytes / 1e6, 'MB')}, {self.files / max(self.seconds, 1e-9):,.0f} files/s"
        if not self.left:
            return f"scan: all read the rest of the {of:,} files: {self.files:,} in {self.seconds:.1f} s ({rate})"
        return (f"scan: all stopped at the check's timeout with {self.left:,} of the {of:,} files not read ({self.files:,} "
                f"read in {self.seconds:.1f} s, {rate}): raise the instance's timeout to read them all")


def rest_of_pass(built: Loader, seconds: float, clock: Callable[[], float] = time.monotonic) -> Scanned:
    """Read what is left of ``built``'s pass (its ``first_pass``: the files no check of the run read yet) in one
    fresh pool of its workers, for at most ``seconds``, reporting progress every ``PROGRESS_S``
    (``base.on_progress``: files, bytes, rate, time left)."""
    passed = built.first_pass
    left = len(passed) if passed is not None else 0
    begun = passed.cursor if passed is not None else 0  # before the pool starts: its workers take indices at once
    counted = built.fresh()
    batches = iter(counted.dataloader if left else ())  # a spent pass is not started again: that would be a reread
    start = last = clock()
    nbytes = 0
    try:
        for batch in batches:
            nbytes += counted.count(batch)[1]
            now = clock()
            read = (passed.cursor if passed is not None else 0) - begun
            if now - last >= PROGRESS_S:
                rate = read / max(now - start, 1e-9)
                remaining = f", ~{(left - read) / rate:.0f} s left" if rate > 0 else ""
                base.on_progress(f"scan: {read:,} of {left:,} files, {format_value(nbytes / 1e6, 'MB')}, "
                                 f"{rate:,.0f} files/s{remaining}")
                last = now
            if now - start >= seconds:
                break
    finally:
        shutdown = getattr(batches, "_shutdown_workers", None)  # its workers end now, as at an epoch's end
        if shutdown is not None:
            shutdown()
    read = (passed.cursor if passed is not None else 0) - begun
    again = 0
    if passed is not None and passed.order is not None and read >= left:  # the pass's end: its files all read
        # Files other checks or the cache-bypass probe read before the pass (raw, a block): read, and decoded, here
        # too, so that every file has been through the job's reader once
        inside = set(passed.order)
        for index in (i for i in range(passed.size) if i not in inside):
            if clock() - start >= seconds:
                break
            nbytes += counted.dataloader.dataset[index][1]
            again += 1
    outside = passed.size - len(passed.order) if passed is not None and passed.order is not None else 0
    return Scanned(read + again, nbytes, clock() - start, max(0, left - read) + outside - again)
