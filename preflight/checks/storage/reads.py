"""Sequential and random read loops over data files, uncached, as fio runs them.

``seq_read``: fio ``--rw=read --direct=1 --bs=1M --numjobs=R --offset_increment``: the
bytes are split into R contiguous spans, one reader thread each, read block by block and
wrapped around until the deadline (``--time_based``).

``rand_read``: fio ``--rw=randread --direct=1 --bs=4k --iodepth=D --ramp_time --runtime``:
D synchronous loops (processes x threads, see ``io_parallel``) each read random aligned
blocks over all the bytes in one continuous run; every read is timed, and its completion
time lets ``io_parallel.in_intervals`` cut the run into intervals afterwards (fio's interval logs).
"""

from __future__ import annotations

import bisect
import math
import os
import random
import time
from array import array
from typing import Callable, Sequence

from preflight.checks.storage.data import DataFile
from preflight.io_parallel import Tally
from preflight.io_uncached import ALIGNMENT, Bypass, aligned_buffer, drop_cached, open_uncached

Span = tuple[str, int, int]  # file, start offset, end offset


def spans(files: Sequence[DataFile], readers: int, block: int) -> list[list[Span]]:
    """Split the files' bytes into ``readers`` contiguous runs of whole blocks."""
    total = sum(_usable(f) for f in files) // block * block
    share = max(block, total // readers // block * block)
    runs: list[list[Span]] = []
    start = 0
    for r in range(readers):
        end = total if r == readers - 1 else min(total, start + share)
        runs.append(_locate(files, start, end) if end > start else _locate(files, 0, min(total, share)))
        start = end
    return runs


def _locate(files: Sequence[DataFile], start: int, end: int) -> list[Span]:
    found: list[Span] = []
    base = 0
    for f in files:
        low, high = max(start, base), min(end, base + _usable(f))
        if low < high:
            found.append((f.name, low - base, high - base))
        base += _usable(f)
    return found


def _usable(f: DataFile) -> int:
    # Whole aligned pages only, so that every O_DIRECT offset stays aligned.
    return f.size // ALIGNMENT * ALIGNMENT


def sequential_loop(runs: list[list[Span]], bypass: Bypass, block: int) -> Callable[[int], Callable[[float], Tally]]:
    """A loop factory for ``io_parallel.run_loops``: reader i reads ``runs[i]`` over and over."""

    def make(index: int) -> Callable[[float], Tally]:
        run = runs[index]
        fds = [open_uncached(name, bypass) for name, _, _ in run]
        buffer = aligned_buffer(block)

        def loop(deadline: float) -> Tally:
            start = time.perf_counter()
            ops = nbytes = 0
            try:
                while True:
                    for fd, (_, low, high) in zip(fds, run):
                        if bypass == "fadvise":
                            drop_cached(fd, low, high - low)
                        for offset in range(low, high, block):
                            nbytes += os.preadv(fd, [buffer], offset)
                            ops += 1
                            if time.perf_counter() >= deadline:
                                return Tally(ops, nbytes, array("d"), time.perf_counter() - start)
            finally:
                for fd in fds:
                    os.close(fd)

        return loop

    return make


def random_loop(files: Sequence[DataFile], bypass: Bypass, block: int, seed: int) -> Callable[[int], Callable[[float], Tally]]:
    """A loop factory: each loop reads uniformly random ``block``-aligned blocks of all files."""
    blocks = [f.size // block for f in files]
    ends = [sum(blocks[: i + 1]) for i in range(len(blocks))]

    def make(index: int) -> Callable[[float], Tally]:
        fds = [open_uncached(f.name, bypass) for f in files]
        buffers = [aligned_buffer(block)]
        rng = random.Random(seed * 1_000_003 + index)

        def loop(deadline: float) -> Tally:
            latencies, completions = array("d"), array("d")
            start = now = time.perf_counter()
            nbytes = 0
            try:
                while now < deadline:
                    pick = rng.randrange(ends[-1])
                    which = bisect.bisect_right(ends, pick)
                    offset = (pick - (ends[which - 1] if which else 0)) * block
                    before = time.perf_counter()
                    nbytes += os.preadv(fds[which], buffers, offset)
                    now = time.perf_counter()
                    latencies.append(now - before)
                    completions.append(now)
                    if bypass == "fadvise":  # so that a later pick of this block is read from the device
                        drop_cached(fds[which], offset, block)
                return Tally(len(latencies), nbytes, latencies, now - start, completions, start)
            finally:
                for fd in fds:
                    os.close(fd)

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
