"""Plausibility guard: a read rate the medium cannot deliver is the page cache talking.

Two ceilings, both measured or read on this node rather than assumed:
- the page cache itself: the same bytes read buffered and already cached, with the same
  number of readers; an "uncached" rate at 80% of that or above means the bypass failed
  (fio's documentation warns of the same for buffered runs: "invalidate");
- for network filesystems, the fastest network link (``/sys/class/net/*/speed``, Mb/s):
  an NFS read faster than the wire came from the client cache.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Sequence

from preflight.checks.storage.data import DataFile

CACHE_SHARE = 0.8
PROBE_BYTES = 64 << 20


def page_cache_rate(files: Sequence[DataFile], readers: int, block: int) -> float:
    """MB/s of buffered reads of up to 64 MiB that are in the page cache, ``readers`` threads."""
    name = max(files, key=lambda f: f.size).name
    size = min(PROBE_BYTES, max(f.size for f in files))

    def read_all() -> int:
        total = 0
        with open(name, "rb", buffering=0) as handle:
            buffer = bytearray(block)
            while total < size and (got := handle.readinto(buffer)):
                total += got
        return total

    read_all()  # now cached
    counts = [0] * readers

    def reader(slot: int) -> None:
        counts[slot] = read_all()

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rate = sum(counts) / (time.perf_counter() - start) / 1e6
    fd = os.open(name, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return rate


def link_rate(net: Path = Path("/sys/class/net")) -> float | None:
    """The fastest network link's line rate in MB/s, or None when no link reports a speed."""
    speeds = []
    for device in net.glob("*"):
        if device.name == "lo":
            continue
        try:
            speeds.append(int((device / "speed").read_text().strip()))
        except (OSError, ValueError):
            continue
    best = max((s for s in speeds if s > 0), default=0)
    return best * 1e6 / 8 / 1e6 if best else None


def implausible(rate_mb_s: float, cache_mb_s: float | None, network: bool, link_mb_s: float | None) -> str:
    """Why ``rate_mb_s`` cannot come from the device, or "" when it is plausible."""
    if cache_mb_s and rate_mb_s >= CACHE_SHARE * cache_mb_s:
        return (f"{rate_mb_s:.0f} MB/s is {rate_mb_s / cache_mb_s:.0%} of the page cache's own "
                f"{cache_mb_s:.0f} MB/s: the cache was not bypassed")
    if network and link_mb_s and rate_mb_s > 1.05 * link_mb_s:
        return f"{rate_mb_s:.0f} MB/s exceeds the fastest network link ({link_mb_s:.0f} MB/s): client cache"
    return ""
