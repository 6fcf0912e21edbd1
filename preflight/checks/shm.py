"""Shared memory (``/dev/shm``): size, free space, and a real allocation of the bytes asked for.

PyTorch DataLoader workers hand batches to the main process through shared memory; with
Docker's and Kubernetes' default 64 MiB ``/dev/shm`` a multi-worker loader dies with a
bus error (PyTorch docs, "Multiprocessing best practices"; docker run --shm-size).

A mount of the right size can be full of other jobs' leftovers (segments of killed processes stay until
removed): when free space is short of ``allocate`` but the size is not, ``free`` and ``allocatable`` name what
holds it (``host.shm_segments``: how many files, their bytes, the largest, whether a process still maps them
or their creator runs) and the fix is to remove the stale ones, not a larger ``--shm-size``. The size fix
itself is the threshold's, rounded up to whole GiB (``{required_up}``), not a fixed 8g.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from typing import Any, Mapping

from preflight.checks.base import Budget, Metric, Option, Timing
from preflight.host.fsinfo import filesystem_of
from preflight.io.scratch import ran_out
from preflight.measurement import Measurement, unmeasurable
from preflight.units import Dimension, format_value, to_unit

_FIX = (
    "{path} has {measured}, {required} is needed: start the container with --shm-size={required_up}g, or in "
    "Kubernetes mount an emptyDir with medium: Memory and sizeLimit: {required_up}Gi at {path}"
)
_MODE_FIX = ("{path} is mode {mode} (owner uid {owner}): a job that is not root cannot create its DataLoader's "
             "shared memory there: mount it with mode=1777 (docker run --tmpfs /dev/shm:rw,mode=1777; Kubernetes' "
             "emptyDir medium: Memory is 1777), or chmod 1777 {path}")
OWN = (".preflight-", "preflight")  # preflight's own files there (its allocation, the node lock), never counted
NAME = "shm"
HELP = "size and free space of the shared-memory mount, and a real allocation there"
DURATION = "not used: statvfs and one allocation of `allocate`, well under a second (timeout bounds it)"
STARTUP_S = 1.0  # the allocation of 1 GiB on tmpfs: 0.2-0.9 s on the 2-CPU development VM, busy or not
OPTIONS = (
    Option("path", "path", "/dev/shm", "the shared-memory mount DataLoader workers use"),
    Option("allocate", Dimension.SIZE, "1 GiB", "bytes to reserve for real with posix_fallocate, then release"),
)
METRICS = (
    Metric("size", "GiB", True, "total size of the mount (statvfs f_blocks * f_frsize)", hint=_FIX),
    Metric("free", "GiB", True, "space available on the mount (statvfs f_bavail * f_frsize); when others' files "
           "hold much of it, the row names them: count, bytes, the largest, and whether a process maps or holds "
           "them open (/proc/PID/maps, /proc/PID/fd) or their creator runs (torch_<pid>_ names)",
           hint=_FIX + "; or remove stale files left there by earlier jobs"),
    Metric("world_writable", "", True, "1 when the mount's mode lets every user create files that only their owner "
           "may remove (world-writable and sticky, 1777: what Docker, Kubernetes' medium: Memory and systemd make); "
           "0 otherwise: a job that is not its owner cannot create the loader's segments or semaphores there",
           flag=True, hint="{path} is not mode 1777: a job that is not root cannot create its DataLoader's shared "
           "memory there: mount it with mode=1777, or chmod 1777 {path}"),
    Metric(
        "allocatable",
        "GiB",
        True,
        "bytes that posix_fallocate(3) could reserve in a file there, up to `allocate`; unlike touching an mmap, "
        "a shortfall is an ENOSPC error, never a SIGBUS",
        hint=_FIX + "; a memory limit on the pod also caps tmpfs pages",
        by_user=True,
    ),
)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure size, free space and a real reservation of ``allocate`` bytes on ``path``."""
    path = options["path"]
    try:
        fs = filesystem_of(path)
    except OSError as error:
        reason = f"{path}: {error.strerror}: mount a shared-memory volume there"
        return [unmeasurable(metric.name, reason, metric.unit) for metric in METRICS]
    method = f"statvfs of {fs.describe()}"
    note = "" if fs.memory_backed else f"{path} is {fs.fstype}, not tmpfs: workers' shared memory may be disk-backed"
    wanted = int(options["allocate"])
    held, fix = _held(path, fs.size_bytes, fs.free_bytes, wanted)
    results = [
        Measurement("size", to_unit(fs.size_bytes, "GiB"), "GiB", method=method, reason=note),
        Measurement("free", to_unit(fs.free_bytes, "GiB"), "GiB", method=method, reason=note, note=held, hint=fix),
        _world_writable(path),
    ]
    allocatable = _allocatable(path, wanted)
    return results + [dataclasses.replace(allocatable, note=held, hint=fix) if allocatable.measured else allocatable]


def _held(path: str, size: int, free: int, wanted: int) -> tuple[str, str]:
    """(note, hint) when others' files hold much of the mount (a tenth or more, or free short of ``wanted``); where
    free is short but the size is not, the hint is to remove them (``host.shm_segments``), not a larger size."""
    from preflight.host import shm_segments

    segments = shm_segments.survey(path, OWN)
    if not segments.found or (segments.nbytes < size / 10 and free >= wanted):
        return "", ""
    fix = segments.fix() if size >= wanted > free else ""
    return segments.describe(size), fix


def _world_writable(path: str) -> Measurement:
    """``world_writable`` from ``stat(path)``: a fact of the mount, the same whoever reads it."""
    info = os.stat(path)
    shared = bool(info.st_mode & stat.S_IWOTH and info.st_mode & stat.S_ISVTX)
    mode = f"{stat.S_IMODE(info.st_mode):04o}"
    return Measurement("world_writable", float(shared), "", method=f"stat of {path}: mode {mode}, owner uid "
                       f"{info.st_uid}", reason="" if shared else f"{path} is mode {mode}, not 1777",
                       hint=_mode_fix(path))


def _allocatable(path: str, wanted: int) -> Measurement:
    """Reserve ``wanted`` bytes; on ENOSPC halve until a reservation succeeds (or < 1 MiB)."""
    import tempfile  # here, not at the top: `validate` reads this module's tables and starts faster without it

    method = f"posix_fallocate of {_size(wanted)} in {path}"
    size = wanted
    while size >= 1 << 20:
        try:
            with tempfile.NamedTemporaryFile(prefix=".preflight-shm-", dir=path) as handle:
                os.posix_fallocate(handle.fileno(), 0, size)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM):  # the job's user may not create files there at all
                return unmeasurable("allocatable", f"cannot allocate in {path} as uid {os.geteuid()}: "
                                    f"{error.strerror}: {_mode_fix(path)}", "GiB")
            if error.errno not in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
                return unmeasurable("allocatable", f"cannot allocate in {path}: {error.strerror}", "GiB")
            full = ran_out(path) if error.errno == errno.ENOSPC else ""
            if full.startswith("no inodes"):  # no new segment can be made at all, whatever its size
                return Measurement("allocatable", 0.0, "GiB", method=method, reason=full)
            size //= 2
            continue
        reason = "" if size == wanted else f"only {_size(size)} of {_size(wanted)} could be reserved"
        return Measurement("allocatable", to_unit(size, "GiB"), "GiB", method=method, reason=reason)
    return Measurement("allocatable", 0.0, "GiB", method=method, reason=f"not even 1 MiB could be reserved in {path}")


def _mode_fix(path: str) -> str:
    info = os.stat(path)
    return _MODE_FIX.format(path=path, mode=f"{stat.S_IMODE(info.st_mode):04o}", owner=info.st_uid)


def _size(nbytes: int) -> str:
    return format_value(to_unit(nbytes, "GiB"), "GiB")


def timing(options: Mapping[str, Any], budget: Budget) -> Timing:
    """No measuring time: facts and one allocation, ``STARTUP_S``."""
    return Timing(0.0, STARTUP_S)
