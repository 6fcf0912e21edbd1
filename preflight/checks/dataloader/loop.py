"""Pull batches from a DataLoader over time windows, optionally emulating the GPU's compute.

Accelerator utilization follows MLPerf Storage's definition (MLPerf Storage rules, "AU";
DLIO benchmark, Devarajan et al., CCGrid 2021): the accelerator is emulated by sleeping
``step_time`` per batch, as DLIO's ``computation_time``; AU = total emulated compute time
/ total wall time, with the first steps excluded (our warm-up batches). A loader that
keeps up spends almost no time waiting between steps and reaches ~100%.

A worker that dies surfaces as torch's ``RuntimeError: DataLoader worker (pid(s) N) exited
unexpectedly``. When the cgroup's OOM-kill count rose meanwhile (``cgroup_memory``), the
kernel killed it for memory, and the error says so with the fix.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, NamedTuple

from preflight.cgroup_memory import OomWatch


class Window(NamedTuple):
    samples_per_s: float
    mb_per_s: float
    utilization_pct: float  # emulated compute time / wall time, 100 when step_time is 0


class WorkerOomKilled(RuntimeError):
    """The kernel OOM-killed a DataLoader worker under the cgroup's memory limit."""


class BatchPuller:
    """Pulls batches from an endless loader iterator; counts samples, bytes and compute time.

    ``oom`` is the cgroup's OOM-kill count taken before the loader's workers start.
    """

    def __init__(self, loader: Any, step_time_s: float = 0.0, oom: OomWatch | None = None) -> None:
        self.loader = loader
        self.step_time_s = step_time_s
        self.oom = oom or OomWatch.start()
        with self._explaining_worker_death():
            self.iterator: Iterator[Any] = iter(loader)

    @contextlib.contextmanager
    def _explaining_worker_death(self) -> Iterator[None]:
        """Re-raise torch's dead-worker RuntimeError as ``WorkerOomKilled`` when the OOM count rose.

        Torch raises it from the batch getter ("exited unexpectedly") or from its SIGCHLD
        handler ("is killed by signal"), wherever the main thread is: so around every step.
        """
        try:
            yield
        except RuntimeError as error:
            evidence = self.oom.evidence() if "DataLoader worker" in str(error) else ""
            if not evidence:
                raise
            loader = self.loader
            raise WorkerOomKilled(
                f"{error}: the kernel OOM-killed a DataLoader worker {evidence}: raise the container's or pod's "
                f"memory limit, or lower num_workers ({loader.num_workers}), prefetch_factor "
                f"({loader.prefetch_factor}) or batch_size ({loader.batch_size})") from error

    def _next(self) -> tuple[int, int]:
        try:
            batch = next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.loader)
            batch = next(self.iterator)
        if isinstance(batch, tuple):
            return batch
        return len(batch), batch.element_size() * batch.nelement()

    def skip(self, batches: int) -> None:
        """Warm-up: take ``batches`` steps (workers starting, prefetch filling) and discard them."""
        with self._explaining_worker_death():
            for _ in range(batches):
                self._next()
                self._compute()

    def window(self, seconds: float) -> Window:
        """Steps until at least ``seconds`` of wall time; whole steps only.

        Raises:
            WorkerOomKilled: a worker died and the cgroup's OOM-kill count rose (``skip`` too).
            RuntimeError: torch's own error for any other worker death, unchanged.
        """
        start = time.perf_counter()
        count = size = steps = 0
        with self._explaining_worker_death():
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
