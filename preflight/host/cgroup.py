"""Host layer: where this process's cgroup lives, for the limits and counters read from it.

cgroup v2 mounts one hierarchy at /sys/fs/cgroup, with ``cgroup.controllers`` at its root;
v1 mounts one hierarchy per controller or group of controllers under it (``memory``,
``cpu,cpuacct``). /proc/self/cgroup names this process's cgroup in each: ``0::/path`` for
v2, ``N:memory:/path`` for v1 (cgroups(7); kernel docs Documentation/admin-guide/cgroup-v2.rst).
Every function takes the root and the membership file so tests can point them at a fake tree.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def unified(root: Path = CGROUP_ROOT) -> bool:
    """True when ``root`` is a cgroup v2 hierarchy (its root has ``cgroup.controllers``)."""
    return (root / "cgroup.controllers").is_file()


def directories(controller: str, root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> list[Path]:
    """This process's cgroup directory for ``controller``, then each ancestor up to the hierarchy's root.

    Only directories that exist are listed, nearest first: a limit set on a parent (a
    Kubernetes pod's, above the container's) binds the child too, so callers read them all.
    v2: the one hierarchy at ``root``; v1: the hierarchy mounted for ``controller``
    (``root/memory``, ``root/cpu,cpuacct``). [] when neither is mounted here.
    """
    if unified(root):
        return _up_to(root, _membership(membership, None))
    for hierarchy in [root / controller] + sorted(root.glob(f"*{controller}*")):
        if controller in hierarchy.name.split(",") and hierarchy.is_dir():
            return _up_to(hierarchy, _membership(membership, controller))
    return []


def _membership(membership: Path, controller: str | None) -> str:
    """The cgroup path in v2's hierarchy (``controller`` None) or v1's for ``controller``, "/" if unknown."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (controller is None and number == "0" and controllers == "") or \
                (controller is not None and controller in controllers.split(",")):
            return path or "/"
    return "/"


def _up_to(root: Path, cgroup: str) -> list[Path]:
    """The cgroup's directory and each ancestor up to ``root`` (those that exist)."""
    parts = [p for p in cgroup.split("/") if p and p != ".."]
    return [d for d in (root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)) if d.is_dir()]
