"""Sequential and random read loops over data segments, uncached, as fio runs them (checks layer).

``seq_read``: fio ``--rw=read --direct=1 --bs=1M --numjobs=R --offset_increment --time_based``, R spans, one file open
per reader. ``rand_read``: fio ``--rw=randread --direct=1 --bs=4k --iodepth=D --ramp_time --runtime``, D loops
(``io.parallel``) in one timed run. A file gone since the walk is counted in ``Tally.lost`` (find(1) goes on).
"""

from __future__ import annotations

import bisect
import errno
import itertools
import math
import mmap
import os
import random
import threading
import time
from array import array
from typing import Callable, Sequence

from preflight.checks.storage.data import Segment
from preflight.io.parallel import Tally
from preflight.io.dataset import Dataset
from preflight.io.dataset_walk import LOST
from preflight.io.uncached import Bypass, aligned_buffer, drop_cached, open_uncached



def spans(parts: Sequence[Segment], readers: int, block: int) -> list[list[Segment]]:
    """Split the segments' bytes into ``readers`` contiguous runs of whole blocks."""
    total = sum(end - start for _, start, end in parts) // block * block
    share = max(block, total // readers // block * block)
    runs: list[list[Segment]] = []
    start = 0
    for r in range(readers):
        end = total if r == readers - 1 else min(total, start + share)
        runs.append(_locate(parts, start, end) if end > start else _locate(parts, 0, min(total, share)))
        start = end
    return runs


def _locate(parts: Sequence[Segment], start: int, end: int) -> list[Segment]:
    found: list[Segment] = []
    base = 0
    for name, low, high in parts:
        first, last = max(start, base), min(end, base + high - low)
        if first < last:
            found.append((name, low + first - base, low + last - base))
        base += high - low
    return found


def sequential_loop(runs: list[list[Segment]], bypass: Bypass, block: int, once: bool = False,
                    left: list[list[Segment]] | None = None,
                    dataset: Dataset | None = None) -> Callable[[int], Callable[[float], Tally]]:
    """A loop factory for ``io.parallel.run_loops``: reader i reads ``runs[i]`` until the deadline, or once with
    ``once`` (small files read whole); each open is recorded in the run's ``dataset``. With ``left`` (threads of this
    process) reader i leaves there what it did not read, for the next window to continue. A segment failing with EIO
    is named in ``Tally.failed`` and dropped."""

    def make(index: int) -> Callable[[float], Tally]:
        run = list(runs[index])
        buffer = aligned_buffer(block)

        def loop(deadline: float) -> Tally:
            start = time.perf_counter()
            ops = nbytes = lost = 0
            failed: list[str] = []
            while run:
                for item in list(run):
                    name, low, high = item
                    try:
                        fd = open_uncached(name, bypass, dataset)
                    except LOST:
                        run.remove(item)
                        lost += 1
                        continue
                    try:
                        if bypass == "fadvise":
                            drop_cached(fd, low, high - low)
                        for offset in range(low, high, block):
                            got = os.preadv(fd, [buffer], offset)
                            if 0 < got < min(block, high - offset):  # short before the segment's end: read on,
                                got += _read_on(fd, buffer, offset + got)  # to meet the error it stopped at
                            nbytes += got
                            ops += 1
                            if time.perf_counter() >= deadline:
                                if left is not None:  # the rest of this reader's run, for the next window
                                    rest = [(name, offset + block, high)] if offset + block < high else []
                                    left[index] = rest + run[run.index(item) + 1:]
                                return Tally(ops, nbytes, array("d"), time.perf_counter() - start, lost=lost,
                                             failed=tuple(failed))
                    except OSError:  # EIO and its kin: counted and named, the other segments still read
                        run.remove(item)
                        failed.append(name)
                    finally:
                        os.close(fd)
                if once:
                    break
            if left is not None:
                left[index] = []
            return Tally(ops, nbytes, array("d"), time.perf_counter() - start, lost=lost, failed=tuple(failed))

        return loop

    return make


def _read_on(fd: int, buffer: mmap.mmap, offset: int) -> int:
    """Read on after a short read: read(2) returns the bytes before an error (EIO part way, dansuh17/segan-pytorch#19)
    and this read raises it; any other refusal (EINVAL at a file that shrank) reads nothing more."""
    try:
        return os.preadv(fd, [buffer], offset)
    except OSError as error:
        if error.errno == errno.EIO:
            raise
        return 0


class SharedFiles:
    """Descriptors opened once per process and shared by its loop threads, closed by the last one out: ``acquire``
    (after fork, before the start signal) gives one per name, None where gone; ``release`` at the end."""

    def __init__(self, names: Sequence[str], bypass: Bypass) -> None:
        self.names, self.bypass = list(names), bypass
        self.lock = threading.Lock()
        self.owner, self.users = -1, 0
        self.fds: list[int | None] = []

    def acquire(self) -> list[int | None]:
        with self.lock:
            if self.owner != os.getpid():  # a forked child inherits the parent's state, not its descriptors' users
                self.owner, self.users, self.fds = os.getpid(), 0, [self._open(name) for name in self.names]
            self.users += 1
            return self.fds

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                for fd in self.fds:
                    if fd is not None:
                        os.close(fd)
                self.owner, self.fds = -1, []

    def _open(self, name: str) -> int | None:
        try:
            return open_uncached(name, self.bypass)  # recorded in the dataset when first read (``random_loop``)
        except LOST:
            return None


def random_loop(parts: Sequence[Segment], bypass: Bypass, block: int, seed: int, once_of: int = 0,
                dataset: Dataset | None = None) -> Callable[[int], Callable[[float], Tally]]:
    """A loop factory: each loop reads uniformly random ``block``-aligned blocks of all segments; with ``once_of``
    (small files read whole), loop i reads one random block of each of its own files, then ends (a second read would
    hit a cache). A file is recorded in the run's ``dataset`` when first read."""
    names = sorted({name for name, _, _ in parts})
    shared = SharedFiles(names, bypass)

    def make(index: int) -> Callable[[float], Tally]:
        fds = shared.acquire()
        by_name = dict(zip(names, fds))
        usable = [(by_name[name], low, high) for name, low, high in parts
                  if by_name[name] is not None and high - low >= block]
        names_of = [name for name, low, high in parts if by_name[name] is not None and high - low >= block]
        lost = fds.count(None) if index == 0 else 0  # every process saw the same files gone: count them once
        ends = list(itertools.accumulate((high - low) // block for _, low, high in usable))
        buffers = [aligned_buffer(block)]
        rng = random.Random(seed * 1_000_003 + index)
        read_from: set[int] = set()  # this loop's files read so far, each recorded in the run's pass once
        failed: set[str] = set()  # files whose reads failed with an I/O error

        def loop(deadline: float) -> Tally:
            latencies, completions = array("d"), array("d")
            start = now = time.perf_counter()
            nbytes = 0
            mine = list(range(index % once_of, len(usable), once_of)) if once_of else []
            try:
                while now < deadline and usable and (mine or not once_of):
                    if once_of:  # a file of its own not read yet, and one random block of it
                        which = mine.pop(rng.randrange(len(mine)))
                        fd, low, high = usable[which]
                        offset = low + rng.randrange((high - low) // block) * block
                    else:
                        pick = rng.randrange(ends[-1])
                        which = bisect.bisect_right(ends, pick)
                        fd, low, _ = usable[which]
                        offset = low + (pick - (ends[which - 1] if which else 0)) * block
                    if which not in read_from:
                        read_from.add(which)
                        if dataset is not None:
                            dataset.record(names_of[which])
                    before = time.perf_counter()
                    try:
                        nbytes += os.preadv(fd, buffers, offset)
                    except OSError:  # EIO: named for unreadable_files; the other files' blocks still read
                        failed.add(names_of[which])
                        now = time.perf_counter()
                        continue
                    now = time.perf_counter()
                    latencies.append(now - before)
                    completions.append(now)
                    if bypass == "fadvise":  # so that a later pick of this block is read from the device
                        drop_cached(fd, offset, block)
                return Tally(len(latencies), nbytes, latencies, now - start, completions, start, lost, tuple(failed))
            finally:
                shared.release()

        return loop

    return make


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank, as fio's clat percentiles."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def pooled_percentile(windows: Sequence[Sequence[float]], q: float) -> float:
    """The ``q``-th percentile of every latency of every window together, by nearest rank, as fio reports clat
    percentiles (a median of per-window p99s swings and discards a slow burst).

    Raises:
        ValueError: no window holds a latency.
    """
    pooled = [latency for window in windows for latency in window]
    if not pooled:
        raise ValueError("pooled_percentile() needs at least one latency")
    return percentile(pooled, q)
