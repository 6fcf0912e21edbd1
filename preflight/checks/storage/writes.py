"""Checkpoint-style writes in scratch files: sequential write throughput and fsync latency.

``seq_write``: fio ``--rw=write --bs=1M --end_fsync=1``: write the bytes through the page
cache, fsync, and time both, so the figure is what reached the device.
``fsync_p99``: fio ``--rw=write --bs=4k --fsync=1``: append 4 KiB and fsync, over and over,
and take the 99th percentile of the fsync latencies (fio's ``sync`` percentiles), what a
checkpoint's commit or a metadata journal waits on.
"""

from __future__ import annotations

import os
import time
from array import array

FSYNC_BLOCK = 4096


def write_fsynced(fd: int, size: int, chunk: bytes) -> int:
    """Write ``size`` bytes to the open ``fd`` in ``len(chunk)`` pieces, then fsync; returns bytes written."""
    written = 0
    while written < size:
        written += os.write(fd, chunk[: min(len(chunk), size - written)])
    os.fsync(fd)
    return written


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


def fsync_latencies(name: str, seconds: float) -> array:
    """Append 4 KiB and fsync until ``seconds`` pass (at least 8 times); fsync latencies in seconds."""
    block = os.urandom(FSYNC_BLOCK)
    latencies = array("d")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(latencies) < 8:
            os.write(fd, block)
            before = time.perf_counter()
            os.fsync(fd)
            latencies.append(time.perf_counter() - before)
    finally:
        os.close(fd)
        os.unlink(name)
    return latencies
