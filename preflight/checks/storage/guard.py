"""Plausibility guard: a read rate the medium cannot deliver is the page cache talking (checks layer).

Where the bypass can fail silently (fadvise; O_DIRECT through FUSE, network, overlay), a rate at 80% or more of the
page cache's own (same loop, ``PROBE_SECONDS``) failed to bypass it (fio's "invalidate"); on a network filesystem, one
above the fastest link (``/sys/class/net/*/speed``).
"""

from __future__ import annotations

import os
from pathlib import Path

from preflight.checks.storage import reads
from preflight.checks.storage.data import Segment
from preflight.io.parallel import run_loops
from preflight.io.uncached import drop_cached, open_uncached

CACHE_SHARE = 0.8
PROBE_BYTES = 16 << 20
PROBE_SECONDS = 0.3


def page_cache_rate(runs: list[list[Segment]], block: int, processes: int = 1) -> float:
    """MB/s (10^6 B/s) of the seq_read loop over the first ``PROBE_BYTES`` of ``runs`` (seq_read's spans, shared by
    ``processes``), read once buffered, timed cached for ``PROBE_SECONDS``, then dropped again."""
    share = max(block, PROBE_BYTES // max(1, len(runs)) // block * block)
    probed = [_first_bytes(run, share) for run in runs]
    for run in probed:
        _cache(run, drop=False)
    try:
        tally = run_loops(reads.sequential_loop(probed, "none", block), processes, len(probed) // processes,
                          PROBE_SECONDS)
    finally:
        for run in probed:
            _cache(run, drop=True)
    return tally.nbytes / tally.elapsed_s / 1e6


def _first_bytes(run: list[Segment], nbytes: int) -> list[Segment]:
    out, total = [], 0
    for name, low, high in run:
        if total >= nbytes:
            break
        end = min(high, low + nbytes - total)
        out.append((name, low, end))
        total += end - low
    return out


def _cache(run: list[Segment], drop: bool) -> None:
    """Fill the page cache with ``run``'s bytes, or drop them. Not recorded in the run's dataset: these are bytes
    seq_read just read, read again buffered on purpose, to time the cache that serves them."""
    for name, low, high in run:
        try:
            fd = open_uncached(name, "none")
        except OSError:
            continue
        try:
            if drop:
                drop_cached(fd, low, high - low)
            else:
                os.posix_fadvise(fd, low, high - low, os.POSIX_FADV_WILLNEED)
                os.pread(fd, high - low, low)
        finally:
            os.close(fd)


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
