"""How many CPUs this process may really use: affinity and the cgroup CPU quota.

``os.cpu_count()`` reports the host's cores; inside a container limited to 4 CPUs on a
128-core node, a DataLoader sized from it starves. The quota comes from cgroup v2
``cpu.max`` or v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` (kernel docs:
Documentation/admin-guide/cgroup-v2.rst, scheduler/sched-bwc.rst).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from preflight.host import cgroup
from preflight.host.cgroup import CGROUP_ROOT, PROC_CGROUP

# DataLoader workers above ~70% of the cores tend to starve the main process (DESIGN.md field notes).
WORKER_SHARE = 0.7


def cgroup_quota(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> float | None:
    """CPUs allowed by the cgroup quota (``1.5`` for ``150000 100000``), or None if unlimited.

    Reads this process's cgroup from ``membership`` (/proc/self/cgroup, cgroups(7)) and takes
    the tightest quota on the way from its cgroup up to ``root`` (``cgroup.directories``).
    cgroup v2: ``cpu.max`` holds ``$MAX $PERIOD`` or ``max $PERIOD``; v1:
    ``cpu.cfs_quota_us`` (-1: none) over ``cpu.cfs_period_us`` under the ``cpu`` controller's
    hierarchy.
    """
    quota = _v2_quota if cgroup.unified(root) else _v1_quota
    quotas = [q for q in map(quota, cgroup.directories("cpu", root, membership)) if q is not None]
    return min(quotas, default=None)


def _v2_quota(directory: Path) -> float | None:
    cpu_max = directory / "cpu.max"
    if not cpu_max.is_file():
        return None
    quota, _, period = cpu_max.read_text().strip().partition(" ")
    return int(quota) / int(period) if quota != "max" and period and int(period) > 0 else None


def _v1_quota(directory: Path) -> float | None:
    quota_file, period_file = directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us"
    if not (quota_file.is_file() and period_file.is_file()):
        return None
    quota, period = int(quota_file.read_text().strip()), int(period_file.read_text().strip())
    return quota / period if quota > 0 and period > 0 else None


def available_cpus(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> float:
    """CPUs this process can use: the smaller of its affinity mask and the cgroup quota."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota = cgroup_quota(root, membership)
    except (OSError, ValueError):
        quota = None
    return min(float(affinity), quota) if quota else float(affinity)


def auto_workers(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> int:
    """DataLoader ``num_workers`` for ``auto``: 70% of the usable CPUs, at least 1."""
    return max(1, math.floor(available_cpus(root, membership) * WORKER_SHARE))


# A loader whose workers spend under half their time on a CPU waits more than it computes (on I/O, a remote
# store, a sleep): a CPU quota does not bound it, and more workers than CPUs keep more reads in flight.
WAITING_SHARE = 0.5


def for_waiting(cpu_share: float, cpus: float) -> int:
    """Workers that keep ``WORKER_SHARE`` of ``cpus`` busy when each spends ``cpu_share`` of its time on a CPU:
    ``auto``'s count and the worker sweep's ceiling for a loader that waits (``cpu_share`` < ``WAITING_SHARE``),
    at most twice the CPUs (at least 8): each worker is a copy of the Dataset's memory."""
    ceiling = max(8, 2 * math.ceil(cpus))
    return max(1, min(ceiling, math.floor(cpus * WORKER_SHARE / max(cpu_share, 1e-3))))


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time of ``pids`` so far, in seconds (/proc/PID/stat utime and stime, proc(5)); a pid
    that has gone counts 0."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15, counted after the ")"
    return total / os.sysconf("SC_CLK_TCK")
