"""Run I/O loops in several processes of several threads each, for a fixed time (io layer).

Processes, because threads of one process share the GIL (docs/checks.md, ``rand_read``): processes x threads play
fio's ``iodepth`` as ``--numjobs`` with synchronous I/O. Method (fio ``--time_based --runtime``): every loop set up,
all started on one signal, run to one deadline; the rate is the total work over the longest loop's time.
"""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from array import array
from typing import Callable, NamedTuple, Sequence


class Tally(NamedTuple):
    """What one loop did: operations, bytes, per-operation latencies (s), elapsed time (s); optionally each
    operation's completion (``completions``, ``time.perf_counter()``) and ``started``, for fio-style interval logs."""

    ops: int
    nbytes: int
    latencies: array  # array("d") of seconds; empty when the loop does not time single operations
    elapsed_s: float
    completions: Sequence[float] = ()  # parallel to latencies, or empty
    started: float = 0.0
    lost: int = 0  # files skipped because they vanished or turned unreadable since they were chosen
    failed: tuple[str, ...] = ()  # files whose read failed with an I/O error (EIO: a bad sector, a lost object)


# make_loop(index) runs after fork, opens what the loop needs, returns run(deadline) -> Tally.
LoopFactory = Callable[[int], Callable[[float], Tally]]


def run_loops(make_loop: LoopFactory, processes: int, threads: int, seconds: float) -> Tally:
    """Run ``processes * threads`` loops for ``seconds`` and return their combined tally.

    Raises:
        OSError: a loop failed (the first error, re-raised in the caller).
    """
    if processes <= 1:
        return _combine(_run_threads(make_loop, range(threads), seconds, lambda: None))
    context = multiprocessing.get_context("fork")
    pipes, children = [], []
    for p in range(processes):
        parent_end, child_end = context.Pipe()
        child = context.Process(target=_child, args=(child_end, make_loop, range(p * threads, (p + 1) * threads),
                                                     seconds), daemon=True)
        child.start()
        pipes.append(parent_end)
        children.append(child)
    try:
        for pipe in pipes:
            _expect(pipe.recv(), "ready")
        for pipe in pipes:
            pipe.send("go")
        tallies: list[Tally] = []
        for pipe in pipes:
            tallies += _expect(pipe.recv(), "done")
        return _combine(tallies)
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
                child.join()


def _child(pipe, make_loop: LoopFactory, indices: range, seconds: float) -> None:  # type: ignore[no-untyped-def]
    try:
        tallies = _run_threads(make_loop, indices, seconds, lambda: (pipe.send(("ready", None)), pipe.recv()))
        pipe.send(("done", tallies))
    except BaseException as error:  # noqa: BLE001  reported to the parent, which raises it
        if isinstance(error, OSError):
            pipe.send(("error", (error.errno, error.strerror, error.filename)))
        else:
            pipe.send(("error", (None, f"{type(error).__name__}: {error}", None)))


def _run_threads(make_loop: LoopFactory, indices: range, seconds: float, wait: Callable[[], object]) -> list[Tally]:
    loops = [make_loop(i) for i in indices]
    wait()
    results: list[Tally | BaseException] = [OSError("loop did not run")] * len(loops)
    deadline = time.perf_counter() + seconds

    def run(slot: int) -> None:
        try:
            results[slot] = loops[slot](deadline)
        except BaseException as error:  # noqa: BLE001  re-raised below, in the calling thread
            results[slot] = error

    workers = [threading.Thread(target=run, args=(slot,), daemon=True) for slot in range(len(loops))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def _expect(message: tuple[str, object], kind: str) -> list[Tally]:
    what, payload = message
    if what == "error":
        code, text, name = payload  # type: ignore[misc]
        raise OSError(code, text, name)
    if what != kind:
        raise RuntimeError(f"I/O child sent {what!r}, expected {kind!r}")
    return payload  # type: ignore[return-value]


def _combine(tallies: list[Tally]) -> Tally:
    latencies, completions = array("d"), array("d")
    for tally in tallies:
        latencies.extend(tally.latencies)
        completions.extend(tally.completions)
    return Tally(sum(t.ops for t in tallies), sum(t.nbytes for t in tallies), latencies,
                 max(t.elapsed_s for t in tallies), completions, min(t.started for t in tallies),
                 sum(t.lost for t in tallies), tuple(name for t in tallies for name in t.failed))


class Interval(NamedTuple):
    """The operations of one interval of a continuous run: its rate and its latencies (s)."""

    ops_per_s: float
    latencies: array


def in_intervals(tally: Tally, ramp_s: float, window_s: float) -> list[Interval]:
    """Cut a continuous ``tally`` (with ``completions`` and ``started``) into whole ``window_s`` intervals after
    ``ramp_s``, each operation in the interval it completed in (fio's ``--log_avg_msec``)."""
    count = max(0, int((tally.elapsed_s - ramp_s) / window_s))
    latencies = [array("d") for _ in range(count)]
    origin = tally.started + ramp_s
    for done, latency in zip(tally.completions, tally.latencies):
        slot = math.floor((done - origin) / window_s)
        if 0 <= slot < count:
            latencies[slot].append(latency)
    return [Interval(len(window) / window_s, window) for window in latencies]
