"""Host facts that decide pinned-memory and copy behaviour: memory limits and NUMA placement.

From the kernel's interfaces (proc(5), sysfs-devices-node, cgroup ``memory.max``/``memory.limit_in_bytes``,
getrlimit(2)); each function takes its root, for tests; torch is not imported.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from preflight.host import cgroup_memory
from preflight.host.gpu_memory import PIN_REFUSED
from preflight.units import format_value, with_article


def memlock_limit() -> str:
    """RLIMIT_MEMLOCK (soft), for people: ``"unlimited"`` or ``"64 MiB"``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else _size(soft)


def _size(nbytes: float) -> str:
    """``64 MiB``, ``1.5 GiB``: a byte count as a person would say it."""
    return format_value(float(nbytes), "B")


def mem_available(root: str = "/") -> int | None:
    """MemAvailable from /proc/meminfo in bytes, None when unreadable."""
    try:
        for line in Path(root, "proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_memory_limit(root: str = "/") -> int | None:
    """This process's cgroup memory limit in bytes (the tightest up its cgroup tree), None when unlimited or unknown."""
    return cgroup_memory.memory_limit(Path(root, "sys/fs/cgroup"), Path(root, "proc/self/cgroup"))


def container_runtime(root: str = "/", environ: dict[str, str] | None = None) -> str:
    """``"kubernetes"``, ``"docker"``, ``"podman"`` or ``""`` (not in a container, as far as we can tell)."""
    environ = dict(os.environ) if environ is None else environ
    if "KUBERNETES_SERVICE_HOST" in environ:
        return "kubernetes"
    if Path(root, ".dockerenv").exists():
        return "docker"
    if Path(root, "run/.containerenv").exists():
        return "podman"
    return ""


def pinned_failure(size: int, error: str, root: str = "/", environ: dict[str, str] | None = None,
                   requested: int | None = None) -> str:
    """Why a pinned allocation of ``size`` bytes failed, with the numbers that decide it and the fix: pinned memory is
    host RAM under the container's limit and RLIMIT_MEMLOCK, no GPU fault (CUDA C++ Best Practices Guide, "Pinned
    Memory"). ``requested``: what the caller asked for, when rounded up to ``size``."""
    facts = [f"RLIMIT_MEMLOCK {memlock_limit()}", *_memory_facts(root)]
    runtime = container_runtime(root, environ)
    fix = {
        "docker": "raise --memory and run with --ulimit memlock=-1",
        "podman": "raise --memory and run with --ulimit memlock=-1",
        "kubernetes": "raise the pod's memory limit (pinned pages count against it) and the node's memlock ulimit",
    }.get(runtime, "free host memory or raise `ulimit -l`")
    if PIN_REFUSED in error.lower():
        fix = (f"CUDA refused one pinned block of {_size(size)}, which some drivers and hosts do from a few GiB "
               f"up while smaller blocks pin: pin in smaller blocks (lower transfer.pinned_size to find the "
               f"largest), or {fix}")
    where = f" in {with_article(runtime)} container" if runtime else ""
    asked = f" ({_size(requested)} requested, rounded up)" if requested not in (None, size) else ""
    return (f"could not pin {_size(size)}{asked} of host memory{where} ({error}); {', '.join(facts)}: {fix}; "
            f"this is a host memory limit, not a GPU fault")


def host_failure(size: int, error: str, root: str = "/", environ: dict[str, str] | None = None) -> str:
    """Why an ordinary host allocation of ``size`` bytes failed (c10's DefaultCPUAllocator, under the container's
    memory limit), with the numbers and the fix."""
    runtime = container_runtime(root, environ)
    fix = {"docker": "raise --memory", "podman": "raise --memory",
           "kubernetes": "raise the pod's memory limit"}.get(runtime, "free host memory")
    where = f" in {with_article(runtime)} container" if runtime else ""
    return (f"could not allocate {_size(size)} of pageable host memory{where} ({error}); "
            f"{', '.join(_memory_facts(root))}: {fix}; this is a host memory limit, not a GPU fault")


def _memory_facts(root: str) -> list[str]:
    available, limit = mem_available(root), cgroup_memory_limit(root)
    return [f"MemAvailable {_size(available)}" if available is not None else "MemAvailable unknown",
            f"cgroup memory limit {_size(limit)}" if limit is not None else "no cgroup memory limit"]


def numa_node_of_pci(bus_id: str, root: str = "/") -> int | None:
    """The NUMA node sysfs gives for a PCI device (``0000:3b:00.0``); None when unknown, -1 when none."""
    try:
        return int(Path(root, "sys/bus/pci/devices", bus_id, "numa_node").read_text())
    except (OSError, ValueError):
        return None


def process_numa_nodes(cpus: set[int] | None = None, root: str = "/") -> tuple[int, ...]:
    """NUMA nodes holding the CPUs this process may run on (``os.sched_getaffinity``)."""
    cpus = set(os.sched_getaffinity(0)) if cpus is None else cpus
    nodes = []
    for node_dir in sorted(Path(root, "sys/devices/system/node").glob("node[0-9]*")):
        try:
            listed = _cpu_list(Path(node_dir, "cpulist").read_text())
        except OSError:
            continue
        if listed & cpus:
            nodes.append(int(node_dir.name[4:]))
    return tuple(nodes)


def _cpu_list(text: str) -> set[int]:
    """``"0-3,8,10-11"`` -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if "-" in part:
            low, high = part.split("-")
            cpus.update(range(int(low), int(high) + 1))
        elif part:
            cpus.add(int(part))
    return cpus
