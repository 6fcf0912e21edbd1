"""The DataLoader's copy-on-write growth: what forked workers copy of the main process's pages, fitted on readings.

Loading layer (footprint): ``fit`` finds the ``Saturation`` in ``memory.Watched``'s readings, ``memory.project`` takes
it to an epoch. The model and its accuracy: docs/benchmarks.md (dataloader_memory).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence


class Saturation(NamedTuple):
    """Copy-on-write growth that saturates: what ``workers`` forked workers copy of the main process's pages.

    A worker dirties the reference count of every object it reads, copying each page once (pytorch/pytorch#13246,
    #5902, #20433): having read a fraction ``x`` of shuffled records, ``k`` a page, it copied
    ``per_worker x (1 - (1 - x)^k)``. The loader's PSS grows by one page per page copied (proc.rst).
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
    """The ``Saturation`` that best fits the workers' copies against the samples each pool delivered; None with fewer
    than two readings, no workers or no epoch.

    Method: ``dirty = offset(pool) + workers per_worker (1 - (1 - s / (workers epoch))^k)`` on the sum of the workers'
    ``Private_Dirty``; for each ``k`` of ``_KS``, ``per_worker`` (in [0, ``bound``]) and the offsets by linear least
    squares. Of the fits within ``_NOISE`` of the best, the one projecting the most is kept (``bound`` where no
    slowing shows); ``fitted`` says whether the slowing was seen.
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
