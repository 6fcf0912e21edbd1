"""The DataLoader's copy-on-write growth: what forked workers copy of the main process's pages, fitted on readings.

A worker writes the reference count of every Python object it reads, so it copies each page that holds
a record it read (pytorch/pytorch#13246, #5902, #20433); it copies a page once, so its copies slow as
its reads land on pages it already holds, and stop at the pages its records sit on. ``fit`` finds the
curve in the readings ``memory.Watched`` takes after each window; ``memory.project`` projects it to an epoch.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence


class Saturation(NamedTuple):
    """Copy-on-write growth that saturates: what ``workers`` forked workers copy of the main process's pages.

    A worker writes the reference count of every Python object it reads, so it copies each page that
    holds a record it read (pytorch/pytorch#13246); it copies a page once, and no more than the main
    process's pages. A worker that has read a fraction ``x`` of the records, in a shuffled order, has
    copied a page holding ``k`` records unless it missed all ``k``: ``per_worker x (1 - (1 - x)^k)``.
    PSS (Documentation/filesystems/proc.rst: a page shared by n processes counts 1/n in each) sums to
    the physical memory, so the loader's anonymous PSS grows by one page per page copied, whoever copies it.
    """

    per_worker: float  # bytes: what one worker copies once it has read every record (the touched pages)
    k: float  # records per page copied (effective: pages of different kinds hold different counts)
    workers: int  # workers sharing an epoch's records, each reading 1/workers of them
    fitted: bool  # True: the windows showed the growth slowing; False: not seen, the largest fit allowed kept
    bound: float  # bytes: the most a worker could copy (``bound_of``)
    bound_of: str = "the main process's anonymous memory"  # what ``bound`` is, for the message

    def copied(self, samples: float, epoch: int) -> float:
        """Bytes the workers have copied after ``samples`` of an ``epoch`` of records, shared out among them."""
        x = min(1.0, samples / (self.workers * epoch))
        return self.workers * self.per_worker * -math.expm1(self.k * math.log1p(-x)) if x < 1 else \
            self.workers * self.per_worker


# The records per page tried by the fit: 1 (a record's pages its own) to 10,000 (tiny records packed densely).
_KS = tuple(10 ** (i / 16) for i in range(65))
# Readings are whole pages and a main process's batches come and go: within this many bytes per reading a fit
# is not told apart from another, and the larger projection of the two is kept.
_NOISE = 2**20


def fit(pools: Sequence[Sequence[Any]], epoch: int, workers: int, bound: float) -> Saturation | None:
    """The ``Saturation`` that best fits the workers' copies against the samples each pool delivered.

    ``pools``: each pool's ``memory.Reading``s in order (samples delivered, each worker's ``Private_Dirty``).

    Method: a page a worker copies is its own, so the sum of the workers' ``Private_Dirty`` grows by each
    page copied (and by what they allocate, a constant per pool once they run). Each pool's workers start
    from the main process's pages, so every pool is one draw of the same curve:
    ``dirty = offset(pool) + workers per_worker (1 - (1 - s / (workers epoch))^k)``. For each
    ``k`` on a log grid (``_KS``), ``per_worker`` and the pools' offsets are a linear least-squares fit,
    ``per_worker`` held to [0, ``bound``]. Windows that read too few records for the copies to slow
    (``k x`` small) fit a straight line as well as a curve: among the fits within ``_NOISE`` of the best,
    the one projecting the most is kept, which is ``bound`` where the windows show no slowing, and
    ``fitted`` says whether the slowing was seen (the bound's fit is worse than the best by more than the noise).
    None: fewer than two readings, no workers or no epoch.
    """
    import numpy as np  # a runtime dependency already; here so that importing this module stays cheap

    rows = [p for p in pools if len(p) >= 2]
    if not rows or workers < 1 or not epoch or bound <= 0:
        return None
    samples = np.array([r.delivered for p in rows for r in p], dtype=float)
    anon = np.array([sum(w.private_dirty for w in r.workers) for p in rows for r in p], dtype=float)
    which = np.array([i for i, p in enumerate(rows) for _ in p])
    offsets = np.eye(len(rows))[which]
    x = np.minimum(samples / (workers * epoch), 1.0)

    def solve(k: float, fixed: float | None = None) -> tuple[float, float]:
        curve = workers * -np.expm1(k * np.log1p(-np.minimum(x, 1 - 1e-12)))
        if fixed is None:
            coef, *_ = np.linalg.lstsq(np.column_stack([offsets, curve]), anon, rcond=None)
            per = float(min(max(coef[-1], 0.0), bound))
        else:
            per = fixed
        rest, *_ = np.linalg.lstsq(offsets, anon - per * curve, rcond=None)
        return per, float(np.sum((anon - offsets @ rest - per * curve) ** 2))

    fits = [(k, *solve(k)) for k in _KS]
    best = min(sse for _, _, sse in fits)
    tolerance = best + len(anon) * _NOISE ** 2
    close = [Saturation(per, k, workers, False, bound) for k, per, sse in fits if sse <= tolerance]
    chosen = max(close, key=lambda s: s.copied(epoch, epoch) - s.copied(float(samples.max()), epoch))
    # Seen saturating: holding a worker's copies at the bound fits no k within the noise, the readings are more than
    # the unknowns (a pool of two readings fits every k exactly), and the copies kept are clearly under the bound.
    at_bound = min(solve(k, bound)[1] for k in _KS)
    return chosen._replace(fitted=len(anon) > len(rows) + 1 and at_bound > tolerance and chosen.per_worker < 0.9 * bound)
