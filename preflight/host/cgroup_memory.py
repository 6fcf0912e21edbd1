"""Host layer: this process's cgroup memory limit and its OOM-kill count, to tell an OOM kill from a crash.

A process the kernel OOM-kills dies of SIGKILL like any other; only the cgroup's own
counter says why. cgroup v2 (kernel docs Documentation/admin-guide/cgroup-v2.rst, "Memory
Interface Files"): ``memory.max`` is the hard limit in bytes or ``max``; ``memory.events``
holds ``key value`` lines, of which ``oom_kill`` counts the processes of the cgroup (and of
its descendants, unless mounted with memory_localevents) killed by any kind of OOM killer.
cgroup v1 (Documentation/admin-guide/cgroup-v1/memory.rst): ``memory.limit_in_bytes``, a
value near 2^63 meaning none; ``memory.oom_control`` holds ``oom_kill N`` since Linux 4.13.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from preflight.host import cgroup, stuck
from preflight.host.cgroup import CGROUP_ROOT, PROC_CGROUP
from preflight.units import format_value

UNLIMITED_V1 = 2**60  # v1 writes PAGE_COUNTER_MAX pages in bytes (~2^63) for "no limit"


class OomCount(NamedTuple):
    kills: int
    file: Path  # the memory.events or memory.oom_control it was read from


def oom_kills(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> OomCount | None:
    """Processes of this process's memory cgroup OOM-killed so far, or None when the kernel does not say.

    Read from the process's own cgroup (not an ancestor's): the count covers kills made for
    a limit set higher up too. Raises nothing; an unreadable or malformed file is None.
    """
    directories = cgroup.directories("memory", root, membership)
    if not directories:
        return None
    counter = directories[0] / ("memory.events" if cgroup.unified(root) else "memory.oom_control")
    try:
        for line in counter.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return OomCount(int(value), counter)
    except (OSError, ValueError):
        pass
    return None


def memory_limit(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> int | None:
    """The tightest memory limit in bytes on this process's cgroup or an ancestor; None when unlimited or unknown.

    v2: ``memory.max``; v1: ``memory.limit_in_bytes``, and ``hierarchical_memory_limit`` in the
    process's own ``memory.stat``: the kernel's minimum over every ancestor, including those a
    container cannot see because its runtime bind-mounts its own cgroup at the hierarchy's root
    (Docker on v1: the pod's or slice's limit sits above it; cloudfoundry/gosigar#56,
    VictoriaMetrics/VictoriaMetrics#699). Raises nothing.
    """
    unified = cgroup.unified(root)
    name = "memory.max" if unified else "memory.limit_in_bytes"
    directories = cgroup.directories("memory", root, membership)
    limits = [_read_limit(directory / name) for directory in directories]
    if directories and not unified:
        limits.append(_stat(directories[0] / "memory.stat", "hierarchical_memory_limit"))
    return min((limit for limit in limits if limit is not None), default=None)


def memory_high(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> int | None:
    """The tightest cgroup v2 ``memory.high`` in bytes up this process's cgroup tree; None when unset, v1 or unknown.

    Above ``memory.high`` the kernel reclaims the cgroup's pages and throttles its allocations
    (kernel docs cgroup-v2.rst, "memory.high"; Kubernetes MemoryQoS sets it below the limit), so
    a loader past it slows down well before ``memory.max`` kills it. Raises nothing.
    """
    if not cgroup.unified(root):
        return None
    highs = [_read_limit(directory / "memory.high") for directory in cgroup.directories("memory", root, membership)]
    return min((high for high in highs if high is not None), default=None)


def _read_limit(file: Path) -> int | None:
    """A limit file's bytes; None when unreadable, ``max`` or v1's near-2^63 for none."""
    try:
        text = file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < UNLIMITED_V1 else None


def _stat(file: Path, key: str) -> int | None:
    """``key``'s value in a ``memory.stat`` file, None when absent, unreadable or v1's near-2^63 for none."""
    try:
        for line in file.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value) if int(value) < UNLIMITED_V1 else None
    except OSError:
        pass
    return None


def readable(size: float) -> str:
    """Bytes for people in the binary unit that fits them (``units.format_value``, the one helper every byte size
    goes through): ``"400 MiB"``, ``"1.2 GiB"``, ``"180 KiB"``, ``"0 B"``. Never a figure rounded to 0 in one unit
    beside another unit: "each copies at most 0 MiB of 500 KiB" (issue 35) now reads "0 B of 500 KiB"."""
    return format_value(float(size), "B")


class OomWatch(NamedTuple):
    """The cgroup's OOM-kill count when some work began, to say afterwards whether the kernel killed during it."""

    before: OomCount | None
    root: Path = CGROUP_ROOT
    membership: Path = PROC_CGROUP

    @classmethod
    def start(cls, root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> OomWatch:
        return cls(oom_kills(root, membership), root, membership)

    def evidence(self) -> str:
        """How the kernel's count shows an OOM kill since ``start``, or "" when it does not.

        ``"under the cgroup memory limit of 400 MiB (oom_kill in memory.events rose from 0 to 1)"``
        """
        after = oom_kills(self.root, self.membership)
        if self.before is None or after is None or after.kills <= self.before.kills:
            return ""
        limit = memory_limit(self.root, self.membership)
        under = (f"under the cgroup memory limit of {readable(limit)}" if limit else
                 "with no cgroup memory limit set, so the node itself ran out of memory")
        return f"{under} (oom_kill in {after.file.name} rose from {self.before.kills} to {after.kills})"


def shmem(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> int | None:
    """Bytes of tmpfs and shared memory (/dev/shm, memfd, SysV shm) charged to this process's memory cgroup.

    Files on a tmpfs are charged to the cgroup of the process that wrote them and count against
    its limit whether or not anything maps them (kernel docs cgroup-v1/memory.rst 2.2.1, "tmpfs";
    moby/moby#47967). v2: ``shmem`` in ``memory.stat`` (descendants included); v1: ``total_shmem``.
    None where no memory cgroup is found (v2's root has no memory.stat) or the file is unreadable.
    """
    directories = cgroup.directories("memory", root, membership)
    if not directories:
        return None
    return _stat(directories[0] / "memory.stat", "shmem" if cgroup.unified(root) else "total_shmem")


def shared_with_others(pid: int, root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP,
                       proc: Path = Path("/proc")) -> bool | None:
    """Whether this process's memory cgroup, its descendants included (as ``shmem`` counts them), holds a process
    that is neither ``pid``, nor one of its ancestors (the shell or runtime that started it), nor one of its
    descendants (its DataLoader workers and what they start): another program, whose tmpfs files the cgroup's
    counters add to ``pid``'s. None where the cgroup's ``cgroup.procs`` cannot be read.

    A container's or a Slurm step's cgroup holds the job's processes alone; a CI runner's, a login session's or a
    bare node's root cgroup holds others (herdrdev/herdr#2178: 9.9 GB of shmem in a server's cgroup was a CUDA
    benchmark started from one of its panes)."""
    directories = cgroup.directories("memory", root, membership)
    if not directories:
        return None
    members: set[int] = set()
    for at, _, _ in os.walk(directories[0]):
        try:
            members.update(int(member) for member in Path(at, "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            if at == str(directories[0]):
                return None  # a descendant gone since the walk listed it is no member
    ancestors = set(_lineage(pid, proc))
    return any(member not in ancestors and pid not in _lineage(member, proc) for member in members)


def _lineage(pid: int, proc: Path) -> list[int]:
    """``pid`` and its ancestors up to the first process of its PID namespace, from ``/proc/PID/stat``'s ppid
    (proc(5)); where a process is gone, its lineage ends there."""
    lineage = []
    while pid > 0 and pid not in lineage:
        lineage.append(pid)
        fields = stuck.stat_fields(str(proc / str(pid) / "stat"))
        pid = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
    return lineage
