"""The DataLoader's tasks (processes and threads) against the pids limits the job will meet (loading layer).

Method (limits by ``host.pids.read`` before any loader starts; docs/faults-and-noise.md, pids and threads)::

    available = tightest limit - in use + runner's tasks + this process's tasks        (pids_available)
    needed    = max over every pool's windows of this process's tasks + each worker's (/proc/PID/task)
    headroom  = (available - needed) / available                                        (pids_headroom)

``needed`` is measured, not derived (2-3 tasks per worker with torch 2.x); EAGAIN is ``host.pids.explain``'s.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

from preflight.host import pids
from preflight.measurement import Measurement, unmeasurable

HINT = ("the job's loader needs {needed} tasks (processes and threads) of the {available} the pids limit leaves: "
        + pids.FIX + ", or lower num_workers ({workers})")


def available(limits: pids.Limits) -> tuple[int, str] | None:
    """Tasks the job's loader may hold in the tightest scope, and the method naming every limit read; None if none."""
    scope = limits.tightest(spare_gate=True)
    if scope is None:
        return None
    others = limits.method(but=scope)
    method = (f"tightest: {scope.describe()}; this process's {limits.own} tasks are the job's main process's, "
              f"counted in the loader's; read before the loader started" + (f"; also {others}" if others else ""))
    return scope.available + scope.gate + limits.own, method


def fact(limits: pids.Limits) -> Measurement:
    """``pids_available``: tasks the job's loader may hold (count), the tightest limit named in its method."""
    got = available(limits)
    if got is None:
        return unmeasurable("pids_available", "no pids limit could be read: no pids cgroup, no /proc/loadavg", "")
    value, method = got
    return Measurement("pids_available", float(value), "", method=method, hint=pids.FIX)


class Needed(NamedTuple):
    """The tasks the job's loader holds at its peak, and how they add up."""

    total: int
    main: int  # the main process's threads read at the peak (a queue feeder per worker, pin-memory, ...)
    intra_op: int  # torch intra-op threads the job's training step adds to its main process
    per_worker: int  # tasks of the busiest reading's average worker, at least a tensor-sending worker's
    workers: int


def needed(readings: Sequence[tuple[int, int]], workers: int, tensor_worker: int, intra_op: int) -> Needed | None:
    """The peak over ``readings`` (main process's tasks, workers' tasks) of what the job's loader holds.

    Each worker counts at least ``tensor_worker`` tasks (the gate's batches are counts, a job's are tensors, which
    start the fd-passing thread); ``intra_op`` threads are added to the main process, as the job's step starts them.
    """
    best: Needed | None = None
    for main, in_workers in readings:
        per_worker = max(-(-in_workers // workers) if workers else 0, tensor_worker if workers else 0)
        total = main + intra_op + max(in_workers, tensor_worker * workers)
        if best is None or total > best.total:
            best = Needed(total, main, intra_op, per_worker, workers)
    return best


def worker_tasks() -> int:
    """Tasks a DataLoader worker holds once it has sent a tensor batch, measured on one real worker here: its main
    thread, its result queue's feeder, and under ``file_descriptor`` sharing the resource-sharer thread (2-3 with
    torch 2.x)."""
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(torch.zeros(8, 4), batch_size=2, num_workers=1)
    iterator = iter(loader)
    try:
        next(iterator)
        next(iterator)
        return max(pids.tasks_of(w.pid) for w in iterator._workers)  # type: ignore[attr-defined]
    finally:
        iterator._shutdown_workers()  # type: ignore[attr-defined]


def intra_op_threads() -> int:
    """Threads torch's intra-op pool adds to a process that runs a parallel op: get_num_threads() - 1."""
    import torch

    return max(0, torch.get_num_threads() - 1)


def probe(workers: int) -> int:
    """``worker_tasks()`` when the loader has workers, before its first pool starts; 0 without workers or when the
    probe was refused at the limit (the workers' own readings then stand alone)."""
    if not workers:
        return 0
    try:
        return worker_tasks()
    except (RuntimeError, OSError):
        return 0


def headroom(limits: pids.Limits, readings: Sequence[tuple[int, int]], options: Mapping[str, Any], workers: int,
             method: str, tensor_worker: int) -> Measurement:
    """``pids_headroom`` (%): the share of ``pids_available`` left at the job's loader's peak of tasks, each worker
    counted at least ``tensor_worker`` tasks (``probe``)."""
    got = available(limits)
    peak = needed(readings, workers, tensor_worker, intra_op_threads()) if got else None
    if got is None or peak is None:
        why = "no pids limit could be read" if got is None else "no /proc/PID/task of the loader could be read"
        return unmeasurable("pids_headroom", why, "%")
    value, limit_method = got
    share = 100.0 * (value - peak.total) / value if value > 0 else -100.0
    sums = (f"{peak.total} tasks = the main process's {peak.main} (a queue feeder per worker, pin-memory) + "
            f"{peak.intra_op} torch intra-op threads of the training step + {peak.workers} workers x {peak.per_worker}")
    return Measurement("pids_headroom", share, "%",
                       method=f"{method}, tasks of the main process and {workers} workers from /proc/PID/task after "
                       f"each window, a worker at least what one sending tensors holds here; {limit_method}",
                       reason=f"the job's loader needs {sums}, of the {value} it may hold",
                       hint=HINT.format(needed=peak.total, available=value, workers=options["num_workers"]))


def oversubscribed(readings: Sequence[tuple[int, int]], workers: int, tensor_worker: int, cpus: float) -> str:
    """What to set where the workers' threads exceed the CPUs the job has: each worker holding more threads than a
    torch worker's own (``tensor_worker``: a BLAS or OpenMP pool starts a thread per core in each, the job's
    transforms in numpy or OpenCV) and together more than ``cpus``; "" otherwise. Their threads then wait on each
    other for the cores, and the loader runs slower than with one each (bench/blas_threads.py)."""
    most = max((-(-in_workers // workers) for _, in_workers in readings), default=0) if workers else 0
    extra = most - max(tensor_worker, 1)
    if extra < 1 or workers * (1 + extra) <= cpus:
        return ""
    return (f"each of the {workers} workers runs {most} threads, {workers * most} on the {cpus:g} CPUs the job has "
            f"(its numpy, OpenCV or torch ops start a thread pool a core wide in every worker): set OMP_NUM_THREADS=1 "
            f"and OPENBLAS_NUM_THREADS=1 (MKL_NUM_THREADS=1 for MKL) in the job's environment, or call "
            f"torch.set_num_threads(1) and threadpoolctl.threadpool_limits(1) in its worker_init_fn")


def refused(limits: pids.Limits, error: BaseException, options: Mapping[str, Any]) -> str | None:
    """Why the loader died, when a pids limit refused one of its threads or processes; None otherwise."""
    return pids.explain(error, limits, f"or lower num_workers ({options['num_workers']})")
