"""Pull batches from a DataLoader over time windows, optionally emulating the GPU's compute.

Accelerator utilization follows MLPerf Storage's definition (MLPerf Storage rules, "AU";
DLIO benchmark, Devarajan et al., CCGrid 2021): the accelerator is emulated by sleeping
``step_time`` per batch, as DLIO's ``computation_time``; AU = total emulated compute time
/ total wall time, with the first steps excluded (our warm-up batches). A loader that
keeps up spends almost no time waiting between steps and reaches ~100%.

A worker that dies surfaces as torch's ``RuntimeError: DataLoader worker (pid(s) N) exited
unexpectedly``. When the cgroup's OOM-kill count rose meanwhile (``cgroup_memory``), the
kernel killed it for memory, and ``explaining_worker_oom`` makes the error say so, with the fix.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Iterator, Mapping, NamedTuple, TypeVar

from preflight.host.cgroup_memory import OomWatch
from preflight.host.cpus import auto_workers

T = TypeVar("T")


class Window(NamedTuple):
    samples_per_s: float
    mb_per_s: float
    utilization_pct: float  # emulated compute time / wall time, 100 when step_time is 0


class EmptyLoader(ValueError):
    """The DataLoader yields no batch at all, even after a restart: its dataset holds no sample."""


class WorkerOomKilled(RuntimeError):
    """The kernel OOM-killed a DataLoader worker under the cgroup's memory limit."""


def explaining_worker_oom(measure: Callable[..., T],
                          watch: Callable[[], OomWatch] = OomWatch.start) -> Callable[..., T]:
    """Wrap a check's ``measure(options, budget, ...)``: name a DataLoader worker's OOM kill, with the fix.

    ``watch`` takes the cgroup's OOM-kill count before any loader starts. When ``measure``
    raises torch's dead-worker RuntimeError and the count rose, ``WorkerOomKilled`` is raised
    instead, naming the limit and the loader settings to lower; any other death keeps torch's
    message. Around the whole of ``measure``, because torch raises that error from its
    SIGCHLD handler at whatever line the main thread is on, not only from the batch getter.
    """

    @functools.wraps(measure)
    def measured(options: Mapping[str, Any], *rest: Any) -> T:
        oom = watch()
        try:
            return measure(options, *rest)
        except RuntimeError as error:
            evidence = oom.evidence() if "DataLoader worker" in str(error) else ""
            if not evidence:
                raise
            workers = options["num_workers"]
            workers = f"auto = {auto_workers()}" if workers == "auto" else workers
            raise WorkerOomKilled(
                f"{error}: the kernel OOM-killed a DataLoader worker {evidence}: raise the container's or pod's "
                f"memory limit, or lower num_workers ({workers}), prefetch_factor ({options['prefetch_factor']}) "
                f"or batch_size ({options['batch_size']})") from error

    return measured


def sizes_or_tensor(batch: Any) -> tuple[int, int]:
    """(samples, bytes) of our own batches: a ``collate_sizes`` pair, or one stacked tensor."""
    if isinstance(batch, tuple):
        return batch
    return len(batch), batch.element_size() * batch.nelement()


class BatchPuller:
    """Pulls batches from an endless loader iterator; counts samples, bytes and compute time.

    ``count(batch) -> (samples, bytes)`` reads a batch: ``sizes_or_tensor`` for preflight's own
    datasets, ``user.count_batch`` for the job's. The loader is restarted at the end of an epoch.
    """

    def __init__(self, loader: Any, step_time_s: float = 0.0,
                 count: Callable[[Any], tuple[int, int]] = sizes_or_tensor) -> None:
        self.loader = loader
        self.step_time_s = step_time_s
        self.count = count
        self.iterator: Iterator[Any] = iter(loader)

    def _next(self) -> tuple[int, int]:
        try:
            batch = next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.loader)
            try:
                batch = next(self.iterator)
            except StopIteration:
                raise EmptyLoader("the DataLoader yields no batch: the dataset is empty") from None
        return self.count(batch)

    def skip(self, batches: int) -> None:
        """Warm-up: take ``batches`` steps (workers starting, prefetch filling) and discard them."""
        for _ in range(batches):
            self._next()
            self._compute()

    def window(self, seconds: float) -> Window:
        """Steps until at least ``seconds`` of wall time; whole steps only."""
        start = time.perf_counter()
        count = size = steps = 0
        while True:
            samples, nbytes = self._next()
            self._compute()
            count, size, steps = count + samples, size + nbytes, steps + 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                utilization = 100.0 * steps * self.step_time_s / elapsed if self.step_time_s else 100.0
                return Window(count / elapsed, size / elapsed / 1e6, min(100.0, utilization))

    def _compute(self) -> None:
        if self.step_time_s:
            time.sleep(self.step_time_s)  # the emulated accelerator's step, as DLIO's computation_time
