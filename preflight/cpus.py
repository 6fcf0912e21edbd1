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

CGROUP_ROOT = Path("/sys/fs/cgroup")
# DataLoader workers above ~70% of the cores tend to starve the main process (DESIGN.md field notes).
WORKER_SHARE = 0.7


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup quota (``1.5`` for ``150000 100000``), or None if unlimited."""
    v2 = root / "cpu.max"
    if v2.is_file():
        quota, _, period = v2.read_text().strip().partition(" ")
        if quota != "max" and period:
            return int(quota) / int(period)
        return None
    for directory in (root / "cpu", root / "cpu,cpuacct", root):
        quota_file, period_file = directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us"
        if quota_file.is_file() and period_file.is_file():
            quota = int(quota_file.read_text().strip())
            period = int(period_file.read_text().strip())
            return quota / period if quota > 0 and period > 0 else None
    return None


def available_cpus(root: Path = CGROUP_ROOT) -> float:
    """CPUs this process can use: the smaller of its affinity mask and the cgroup quota."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota = cgroup_quota(root)
    except (OSError, ValueError):
        quota = None
    return min(float(affinity), quota) if quota else float(affinity)


def auto_workers(root: Path = CGROUP_ROOT) -> int:
    """DataLoader ``num_workers`` for ``auto``: 70% of the usable CPUs, at least 1."""
    return max(1, math.floor(available_cpus(root) * WORKER_SHARE))
