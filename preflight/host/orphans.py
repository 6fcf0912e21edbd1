"""Host layer: the processes preflight runs left stuck in the kernel, remembered for the runs that follow.

A run every few minutes would leave one more each time (monitoring-plugins/monitoring-plugins#1186,
prometheus/node_exporter#578): the abandoning run records it beside the lock (``LOCK.stuck``), and a later run does
not start a check under its path while it lives (same pid start time, still preflight's worker, a thread in D).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import NamedTuple

from preflight.host import stuck

SUFFIX = ".stuck"  # beside the lock file: the directory every run on the node shares
WORKER = "preflight.worker"  # in the command line of every worker the runner starts (``python -m preflight.worker``)


class Orphan(NamedTuple):
    """A process a run abandoned in the kernel, and where it is stuck."""

    pid: int
    start: str  # its start time in clock ticks since boot (/proc/PID/stat field 22): tells a reused pid apart
    path: str  # the file it waits on ("" when none was named)
    instance: str  # the check instance it measured
    since: str  # when it was abandoned, UTC, ISO 8601

    def alive(self, proc: str = stuck.PROC) -> bool:
        """True while this very process (same start time, still preflight's worker) exists with a thread in D; the
        record file is world-writable, so a record naming another process is not believed."""
        fields = stuck.stat_fields(os.path.join(proc, str(self.pid), "stat"))
        if len(fields) <= 19 or fields[19] != self.start or WORKER not in _cmdline(proc, self.pid):
            return False
        return bool(stuck.blocked([self.pid], "D", proc=proc))

    def blocks(self, path: str) -> bool:
        """True when reading ``path`` would reach what this orphan is stuck on: the stuck file lies under
        ``path``, or ``path`` lies on the same mount (not the root filesystem). By name only."""
        if not self.path:
            return False
        mount = stuck.mount_of(self.path).mount_point
        return stuck.contains(path, self.path) or (mount != "/" and stuck.contains(mount, path))


def start_time(pid: int, proc: str = stuck.PROC) -> str:
    """``pid``'s start time in clock ticks since boot ("" when it is gone)."""
    fields = stuck.stat_fields(os.path.join(proc, str(pid), "stat"))
    return fields[19] if len(fields) > 19 else ""


def orphan(blocked: stuck.Blocked, instance: str) -> Orphan:
    """The record of ``blocked``'s process, abandoned now while measuring ``instance``."""
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Orphan(blocked.pid, start_time(blocked.pid), blocked.path, instance, since)


def live(lock_path: str) -> list[Orphan]:
    """The orphans recorded beside ``lock_path`` that are still stuck, the file rewritten without the others; [] when
    there is no readable record. Call it while holding the lock."""
    records = _read(lock_path + SUFFIX)
    alive = [o for o in records if o.alive()]
    if len(alive) != len(records):
        _write(lock_path + SUFFIX, alive)
    return alive


def remember(lock_path: str, orphans: list[Orphan]) -> None:
    """Add ``orphans`` to the record beside ``lock_path`` (while holding the lock); skipped where it cannot be
    written."""
    _write(lock_path + SUFFIX, _read(lock_path + SUFFIX) + orphans)


def _cmdline(proc: str, pid: int) -> list[str]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            return [os.fsdecode(part) for part in handle.read().split(b"\0")]
    except OSError:
        return []


def _read(path: str) -> list[Orphan]:
    try:
        with open(path, encoding="utf-8") as lines:
            return [Orphan(**json.loads(line)) for line in lines if line.strip()]
    except (OSError, ValueError, TypeError):
        return []


def _write(path: str, orphans: list[Orphan]) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(o._asdict()) + "\n" for o in orphans)
        os.chmod(path, 0o666)  # every user's runs share it, as they share the lock
    except OSError:
        pass
