"""Host layer: how many more tasks (processes and threads) this process may start, and which limit stops it.

Every thread and process counts as one task against each of these, and the first one reached makes
``fork``/``clone`` fail with EAGAIN: Python then raises "can't start new thread" or
``BlockingIOError: [Errno 11]``, and a DataLoader worker that cannot start a thread dies, so the main
process says only "DataLoader worker exited unexpectedly" (pytorch/pytorch#132145, PaddlePaddle/PaddleSeg#1184):

- the pids controller of the process's cgroup and of each ancestor (kernel docs
  Documentation/admin-guide/cgroup-v1/pids.rst and cgroup-v2.rst, "PID"): ``pids.max`` (a number or
  ``max``) against ``pids.current``, hierarchical, so the tightest ancestor binds; ``pids.events``
  ``max N`` counts the forks refused because that cgroup's limit was reached. Docker's and Podman's
  ``--pids-limit``, Kubernetes' ``podPidsLimit`` and systemd's ``TasksMax=`` write ``pids.max``;
- ``RLIMIT_NPROC`` (getrlimit(2)): per real user ID, all the user's tasks in the user namespace,
  whichever process or container started them; not enforced for root (CAP_SYS_RESOURCE/CAP_SYS_ADMIN);
- ``kernel.threads-max`` and ``kernel.pid_max`` (proc(5)), system-wide, against the tasks the kernel
  schedules (``/proc/loadavg``'s fourth field's denominator).

The gate's own runner process is not the job's (``Scope.gate``): callers that judge what the job's
loader may start add it back. Every function takes its roots so tests can point them at a fake tree.
"""

from __future__ import annotations

import errno
import os
import resource
import sys
from pathlib import Path
from typing import NamedTuple

from preflight.host import cgroup
from preflight.host.cgroup import CGROUP_ROOT, PROC_CGROUP

PROC = Path("/proc")
FIX = ("raise the pids limit: the cgroup's pids.max, Docker/Podman `--pids-limit`, Kubernetes `podPidsLimit` in "
       "the kubelet configuration, systemd `TasksMax=`")


class Scope(NamedTuple):
    """One limit on the tasks this process may start, with what already counts against it."""

    name: str  # "pids.max", "RLIMIT_NPROC", "kernel.threads-max", "kernel.pid_max"
    limit: int  # tasks allowed in the scope
    used: int  # tasks counted in it now, this process's and the gate's runner's included
    file: str  # where the limit is read: the pids.max file, "getrlimit(RLIMIT_NPROC)", /proc/sys/kernel/...
    gate: int = 0  # of ``used``, the gate's runner process's tasks (the job has no such process)
    events: Path | None = None  # the cgroup's pids.events, whose ``max`` counts forks refused at this limit

    @property
    def available(self) -> int:
        """Tasks that may still start in the scope."""
        return self.limit - self.used

    def describe(self) -> str:
        """``pids.max 40 (/sys/fs/cgroup/pids/job/pids.max): 5 in use, 2 of them the gate's runner``."""
        gate = f", {self.gate} of them the gate's runner" if self.gate else ""
        where = f" ({self.file})" if self.file != self.name else ""
        return f"{self.name} {self.limit}{where}: {self.used} in use{gate}"


class Limits(NamedTuple):
    """Every limit read at one moment (``read``), and the forks each cgroup had refused by then."""

    scopes: tuple[Scope, ...]
    refused: tuple[tuple[Path, int], ...] = ()  # (pids.events, its ``max`` count)
    notes: tuple[str, ...] = ()  # limits that do not bind, and why ("RLIMIT_NPROC not enforced for root")
    own: int = 0  # this process's tasks when read

    def tightest(self, spare_gate: bool = False) -> Scope | None:
        """The scope with the fewest tasks left (with ``spare_gate``, the runner's tasks given back); None if none."""
        return min(self.scopes, key=lambda s: s.available + (s.gate if spare_gate else 0), default=None)

    def method(self, but: Scope | None = None) -> str:
        """Every limit read but ``but``, tightest first, for a row's method."""
        scopes = sorted((s for s in self.scopes if s != but), key=lambda s: s.available)
        return "; ".join([s.describe() for s in scopes] + list(self.notes))


def read(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP, proc: Path = PROC) -> Limits:
    """Every limit on this process's new tasks, and what counts against each now. Raises nothing."""
    runner = _runner()
    scopes: list[Scope] = []
    refused: list[tuple[Path, int]] = []
    runner_dirs = set(cgroup.directories("pids", root, proc / str(runner) / "cgroup")) if runner else set()
    runner_tasks = _tasks(proc, runner) if runner else 0
    for directory in cgroup.directories("pids", root, membership):
        events = directory / "pids.events"
        count = _event_count(events)
        if count is not None:
            refused.append((events, count))
        limit, current = _number(directory / "pids.max"), _number(directory / "pids.current")
        if limit is not None and current is not None:
            gate = runner_tasks if directory in runner_dirs else 0
            scopes.append(Scope("pids.max", limit, current, str(directory / "pids.max"), gate,
                                events if count is not None else None))
    notes: list[str] = []
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY:
        notes.append("RLIMIT_NPROC unlimited")
    elif os.geteuid() == 0:
        notes.append(f"RLIMIT_NPROC {soft} not enforced for root")
    else:
        scopes.append(Scope("RLIMIT_NPROC", soft, user_tasks(os.getuid(), proc), "getrlimit(RLIMIT_NPROC), per user: "
                            "every task of this user counts, in any container; counted in this PID namespace",
                            runner_tasks))
    running = _scheduled(proc)
    if running is not None:
        for name in ("threads-max", "pid_max"):
            limit = _number(proc / "sys" / "kernel" / name)
            if limit is not None:
                scopes.append(Scope(f"kernel.{name}", limit, running, str(proc / "sys" / "kernel" / name),
                                    runner_tasks))
    return Limits(tuple(scopes), tuple(refused), tuple(notes), _tasks(proc, os.getpid()))


def user_tasks(uid: int, proc: Path = PROC) -> int:
    """Tasks (threads) of the processes whose real user ID is ``uid``, as RLIMIT_NPROC counts them.

    Only this PID namespace's are seen: the same user's tasks in other containers count too, unseen."""
    total = 0
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"])
        except (OSError, KeyError, ValueError, IndexError):
            continue  # exited while read
    return total


def tasks_of(pid: int, proc: Path = PROC) -> int:
    """Tasks (threads) of process ``pid`` (``/proc/PID/task``); 0 when it is gone."""
    return _tasks(proc, pid)


def spare(reserve: int = 0, limits: Limits | None = None) -> int | None:
    """Tasks this process may still start in its tightest scope, less ``reserve``; None when no limit is known.

    For the gate's own thread and process pools: a pool sized past this fails with EAGAIN."""
    scope = (limits or read()).tightest()
    return None if scope is None else max(0, scope.available - reserve)


def affordable(processes: int, threads: int, spare_tasks: int | None) -> tuple[int, int]:
    """(processes, threads each) at most as many as ``spare_tasks`` allows, threads given up first.

    ``processes`` > 1 are started as children, each its own main task plus ``threads``; one process
    runs its ``threads`` here. At least one of each is kept: the caller's work then fails with the
    limit's name rather than silently doing nothing (``explain``)."""
    def cost(p: int, t: int) -> int:
        return p * (t + 1) if p > 1 else t

    if spare_tasks is None:
        return processes, threads
    while cost(processes, threads) > spare_tasks and (threads > 1 or processes > 1):
        if threads > 1 and (threads >= processes or processes == 1):
            threads -= 1
        else:
            processes -= 1
    return processes, threads


FREED_BY_DEAD_WORKER = 3  # tasks a DataLoader worker holds (measured here, torch 2.x): gone when it died
_EAGAIN_TEXT = ("can't start new thread", "Resource temporarily unavailable")


def explain(error: BaseException, before: Limits | None, fix: str = "", root: Path = CGROUP_ROOT,
            membership: Path = PROC_CGROUP, proc: Path = PROC) -> str | None:
    """"pids limit N reached (FILE): ..." when ``error`` is a refused thread or process start; else None.

    ``error`` (or an exception in its cause chain) is a refused start when it is EAGAIN (``OSError``
    errno 11 from fork, "can't start new thread") or a DataLoader worker's unexpected exit, and a
    limit was reached: the cgroup whose ``pids.events`` ``max`` count rose since ``before``, else a
    scope with no task left now. Without that evidence None: EAGAIN has other causes. ``fix`` is
    added to the pids fix ("or lower num_workers (8)").
    """
    chain, seen = [], error
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    texts = " ".join(f"{e}" for e in chain)
    refused_start = any(isinstance(e, OSError) and e.errno == errno.EAGAIN for e in chain) or \
        any(text in texts for text in _EAGAIN_TEXT)
    dead_worker = "DataLoader worker" in texts and "exited unexpectedly" in texts
    if not refused_start and not dead_worker:
        return None
    now = read(root, membership, proc)
    counts = dict(before.refused) if before is not None else {}
    # Nearest cgroup first: in v1 and v2 alike the refusal is counted where the limit was reached.
    scope = next((s for s in now.scopes if s.events is not None and s.events in counts
                  and (_event_count(s.events) or 0) > counts[s.events]), None)
    if scope is None:  # RLIMIT_NPROC and the kernel count no refusals: only a limit reached now is evidence, less
        # what a dead worker freed (its main thread, its queue's feeder, the fd-passing thread) when one died
        margin = FREED_BY_DEAD_WORKER if dead_worker and not refused_start else 0
        scope = next((s for s in now.scopes if s.available <= margin), None)
    if scope is None:  # EAGAIN has other causes (a non-blocking read; ENOMEM also says "can't start new thread")
        return None
    first = " ".join(str(chain[0]).split())[:300]
    what = "pids limit" if scope.name == "pids.max" else f"{scope.name} limit"
    fix_text = _fix(scope)
    return (f"{what} {scope.limit} reached ({scope.file}): a thread or process could not start ({first}); "
            f"{scope.used} tasks in use now: {fix_text}" + (f", {fix}" if fix else ""))


def reached_now(margin: int = 1) -> str | None:
    """"pids limit N reached (FILE): ..." when a scope has at most ``margin`` tasks left now; else None.

    For a check that hangs at its timeout: a thread its loader waits on may have been refused. A DataLoader
    whose worker cannot start multiprocessing's fd-passing thread leaves the main process blocked on that
    socket for ever (seen here under RLIMIT_NPROC 16 with 4 workers), so the timeout is the only sign."""
    limits = read()
    scope = next((s for s in sorted(limits.scopes, key=lambda s: s.available) if s.available <= margin), None)
    if scope is None:
        return None
    what = "pids limit" if scope.name == "pids.max" else f"{scope.name} limit"
    return (f"{what} {scope.limit} reached ({scope.file}) at the timeout, {scope.used} tasks in use: a thread or "
            f"process the check waits on could not start; {_fix(scope)}")


def _fix(scope: Scope) -> str:
    """How to raise ``scope``'s limit."""
    if scope.name == "pids.max":
        return FIX
    if scope.name == "RLIMIT_NPROC":
        return ("raise the user's process limit (`ulimit -u`, Docker `--ulimit nproc=`, limits.conf nproc) or run "
                "fewer processes as this user")
    return f"raise {scope.name} (sysctl)"


def _runner() -> int | None:
    """The gate's runner: this process's parent when this is preflight's worker process, else None."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "preflight.worker":
        return os.getppid()
    return None


def _tasks(proc: Path, pid: int) -> int:
    try:
        return len(os.listdir(proc / str(pid) / "task"))
    except OSError:
        return 0


def _scheduled(proc: Path) -> int | None:
    """Tasks the kernel schedules now: the denominator of /proc/loadavg's fourth field ("2/345")."""
    try:
        return int((proc / "loadavg").read_text().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return None


def _number(file: Path) -> int | None:
    """An integer file's value; None for ``max``, a missing or unreadable file."""
    try:
        text = file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _event_count(events: Path) -> int | None:
    """The ``max`` count of a pids.events file: forks refused at this cgroup's limit; None when unreadable."""
    try:
        for line in events.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
    except (OSError, ValueError):
        return None
    return None
