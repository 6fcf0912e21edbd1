"""Pull batches from a DataLoader over time windows, optionally emulating the GPU's compute.

Accelerator utilization follows MLPerf Storage's definition (MLPerf Storage rules, "AU";
DLIO benchmark, Devarajan et al., CCGrid 2021): the accelerator is emulated by sleeping
``step_time`` per batch, as DLIO's ``computation_time``; AU = total emulated compute time
/ total wall time, with the first steps excluded (our warm-up batches). A loader that
keeps up spends almost no time waiting between steps and reaches ~100%.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, NamedTuple


class Window(NamedTuple):
    samples_per_s: float
    mb_per_s: float
    utilization_pct: float  # emulated compute time / wall time, 100 when step_time is 0


class BatchPuller:
    """Pulls batches from an endless loader iterator; counts samples, bytes and compute time."""

    def __init__(self, loader: Any, step_time_s: float = 0.0) -> None:
        self.loader = loader
        self.step_time_s = step_time_s
        self.iterator: Iterator[Any] = iter(loader)

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
