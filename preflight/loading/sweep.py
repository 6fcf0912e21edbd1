"""The worker-count sweep both loading checks run: 1, 2, 4, ... workers, each a fresh pool, and the knee.

The dataloader check sweeps samples/s (``checks.dataloader.sweep``), the pipeline check the share of the model's
samples/s the fed step keeps (``checks.pipeline.sweep``); both find the knee here: the fewest workers within 5 % of
the best count, told apart only where their windows do not overlap.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, NamedTuple, Sequence

from preflight.checks.base import Budget

KNEE_SHARE = 0.95  # within 5 % of the best rate counts as the best: window-to-window noise is about that


def counts(configured: int, cpus: float, ceiling: int = 0) -> list[int]:
    """1, 2, 4, ... up to the largest of ``cpus`` (rounded down), ``configured`` and ``ceiling`` (a loader that waits
    may use more workers than CPUs: ``cpus.for_waiting``), with each included, and never fewer than two counts: a
    knee is not told from one point."""
    top = max(2, configured, math.floor(cpus), ceiling)
    powers = [2**k for k in range(top.bit_length()) if 2**k <= top]
    return sorted({*powers, max(1, math.floor(cpus)), top} | ({configured} if configured >= 1 else set())
                  | ({ceiling} if ceiling >= 1 else set()))


class Curve(NamedTuple):
    """A rate at each worker count swept (higher is better: samples/s here), and each count's windows."""

    counts: tuple[int, ...]
    rates: tuple[float, ...]  # the centre of each count's windows: their mean (``sweep``'s default)
    windows: tuple[tuple[float, ...], ...] = ()  # the rate of each window; () : each rate its only window

    def knee(self) -> int:
        """The fewest workers whose fastest window comes within ``KNEE_SHARE`` of the best count's slowest.

        With one window per count: the fewest within 5 % of the best rate. With several, a count whose
        windows overlap the best's is not told apart from it: on a busy machine a CPU-bound loader's
        windows spread by 10-20 %, and a count that merely drew a quieter moment is no knee.
        """
        windows = self.windows or tuple((rate,) for rate in self.rates)
        best = max(range(len(self.rates)), key=self.rates.__getitem__)
        floor = KNEE_SHARE * min(windows[best])
        return next(n for n, taken in zip(self.counts, windows) if max(taken) >= floor)

    def rate(self, workers: int) -> float | None:
        return dict(zip(self.counts, self.rates)).get(workers)

    def shown(self) -> str:
        """``samples/s at 1, 2, 4 workers: 95, 180, 186``"""
        return (f"samples/s at {', '.join(map(str, self.counts))} workers: "
                f"{', '.join(f'{rate:,.0f}' for rate in self.rates)}")


def sweep(rate_at: Callable[[int, Budget], tuple[float, ...]], worker_counts: Sequence[int], budget: Budget,
          centre: Callable[[Sequence[float]], float] = statistics.fmean) -> Curve:
    """``rate_at(n, share)`` (each window's rate, higher is better) for each count in turn, each an equal share of
    ``budget``; a count's rate is the ``centre`` of its windows (the mean: windows of equal length)."""
    share = budget.split(len(worker_counts))
    taken = tuple(rate_at(n, share) for n in worker_counts)
    return Curve(tuple(worker_counts), tuple(centre(t) for t in taken), taken)
