"""Checkpoint-style writes in scratch files: sequential write throughput and fsync latency (checks layer).

``seq_write``: fio ``--rw=write --bs=1M --end_fsync=1``; ``fsync_p99``: fio
``--rw=write --bs=4k --fsync=1 --size=64M --time_based``, the 99th percentile of fsync latencies (fio's ``sync``
percentiles).
"""

from __future__ import annotations

import os
import time
from array import array

from preflight.io.parallel import Tally
from preflight.io.scratch import write_fsynced

FSYNC_BLOCK = 4096
FSYNC_FILE_BYTES = 64 << 20  # the fsync run's file wraps here (fio --size=64M), so its space is bounded


def write_once(name: str, size: int, chunk: bytes) -> float:
    """Write ``size`` bytes to a new ``name`` and fsync, time it, remove it; returns MB/s (10^6 B/s)."""
    start = time.perf_counter()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = write_fsynced(fd, size, chunk)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    os.unlink(name)
    return written / elapsed / 1e6


def fsync_run(name: str, seconds: float) -> Tally:
    """Write 4 KiB and fsync in one new file until ``seconds`` pass (at least 8 times), wrapping at
    ``FSYNC_FILE_BYTES``, then remove it. Completion times are kept for ``in_intervals``: one continuous run, as
    fio's, since a fresh file's first fsyncs also commit its creation."""
    block = os.urandom(FSYNC_BLOCK)
    latencies, completions = array("d"), array("d")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    start = now = time.perf_counter()
    try:
        deadline = start + seconds
        while now < deadline or len(latencies) < 8:
            os.pwrite(fd, block, len(latencies) * FSYNC_BLOCK % FSYNC_FILE_BYTES)
            before = time.perf_counter()
            os.fsync(fd)
            now = time.perf_counter()
            latencies.append(now - before)
            completions.append(now)
    finally:
        os.close(fd)
        os.unlink(name)
    return Tally(len(latencies), len(latencies) * FSYNC_BLOCK, latencies, now - start, completions, start)
