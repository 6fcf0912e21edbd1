"""Sequential and random read loops over data segments, uncached, as fio runs them.

``seq_read``: fio ``--rw=read --direct=1 --bs=1M --numjobs=R --offset_increment``: the
bytes are split into R contiguous spans, one reader thread each, read block by block and
wrapped around until the deadline (``--time_based``). A reader opens one file at a time,
so descriptors do not grow with the number of files.

``rand_read``: fio ``--rw=randread --direct=1 --bs=4k --iodepth=D --ramp_time --runtime``:
D synchronous loops (processes x threads, see ``io.parallel``) each read random aligned
blocks over all the bytes in one continuous run; every read is timed, and its completion
time lets ``io.parallel.in_intervals`` cut the run into intervals afterwards (fio's interval logs).
The threads of one process share one descriptor per file (``pread`` carries its own offset).

A file that vanished or turned unreadable since the walk is skipped and counted in
``Tally.lost``, as find(1) reports and goes on; it never ends the run.
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
    """A loop factory for ``io.parallel.run_loops``: reader i reads ``runs[i]`` over and over until the deadline;
    with ``once``, one time only (small files read whole: a second read of a file is served by whatever cache
    holds it, and ``measure_io`` gives each window the files no earlier read touched); each open is recorded in
    the run's ``dataset``.

    With ``left`` (loops run as threads of this process), reader i puts there the part of ``runs[i]`` it did not
    read before the deadline, so that the next window continues the stream instead of starting it again.
    A segment whose read fails with an I/O error (EIO) is named in ``Tally.failed`` and dropped.
    """

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
    """Read on after a short read: read(2) returns the bytes it got before an error (EIO part way through a
    file, dansuh17/segan-pytorch#19), and this read raises it. Any other refusal (EINVAL: an unaligned offset
    under O_DIRECT, at a file that shrank since the walk) reads nothing more."""
    try:
        return os.preadv(fd, [buffer], offset)
    except OSError as error:
        if error.errno == errno.EIO:
            raise
        return 0


class SharedFiles:
    """Descriptors opened once per process and shared by its loop threads, closed by the last one out.

    ``acquire`` in a loop factory (after fork, before the start signal) returns one
    descriptor per name, None where the file is gone; ``release`` when the loop ends.
    """

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
    """A loop factory: each loop reads uniformly random ``block``-aligned blocks of all segments.

    With ``once_of`` (the number of loops, for small files read whole), loop i reads one random block of each of
    its own files (every ``once_of``-th from i) in random order, then ends: a file read a second time would be
    served by whatever cache its first read filled, a FUSE client's below the page cache. A file is recorded in
    the run's ``dataset`` when first read.
    """
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
    """The ``q``-th percentile of every latency of every window together, by nearest rank.

    fio reports clat percentiles over all completions of a run, not per interval. The
    median of per-window p99s would be a weaker estimator (each window has few tail
    samples, so it swings run to run) and a biased one: a burst of slow requests inside
    one window moves that window's p99 and is then discarded as the outlier window.

    Raises:
        ValueError: no window holds a latency.
    """
    pooled = [latency for window in windows for latency in window]
    if not pooled:
        raise ValueError("pooled_percentile() needs at least one latency")
    return percentile(pooled, q)
