"""Report layer: how far a metric moves by chance: the CV, the stability target, and the change band of ``diff``.

``bench/noise.py`` holds each metric's CV (stdev / mean) to ``target`` (issue 14); ``preflight diff`` judges a change
against ``band``, floored by ``RUN_TO_RUN`` (docs/benchmarks.md, docs/reports.md "Comparing two runs").
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from preflight.measurement import FLOOR_SAMPLES, RUN_TO_RUN, Floor, floor, held, target  # noqa: F401

# From two values the stdev is off by half or more one time in three: too unsure to widen the band.
MIN_SAMPLES = 3

# The control-chart (Shewhart) limit: at 2 sigma one diff in five of ten metrics would fail by chance (issue 35).
SIGMAS = 3.0


def cv(series: Sequence[float]) -> float:
    """stdev / mean of ``series``; 0 for fewer than two values or a constant 0 (a flag that never changes)."""
    if len(series) < 2:
        return 0.0
    mean = statistics.fmean(series)
    stdev = statistics.stdev(series)
    return stdev / mean if mean else (0.0 if stdev == 0 else float("inf"))


def standard_error(samples: Sequence[float]) -> float:
    """The relative standard error of a run's figure from its own samples, read robustly: 1.253 x 1.4826 x MAD /
    sqrt(n) over the median (the median's standard error; the MAD estimates the stdev, 1.4826 MAD for a normal
    spread), so one burst window among steady ones does not widen it (issue 44: a throttle's start-up burst read 4x
    its rate in one window of six); 0 for under ``MIN_SAMPLES``."""
    if len(samples) < MIN_SAMPLES:
        return 0.0
    middle = statistics.median(samples)
    mad = statistics.median(abs(s - middle) for s in samples)
    return 1.253 * 1.4826 * mad / math.sqrt(len(samples)) / abs(middle) if middle else 0.0


def run_noise(metric_id: str, samples: Sequence[float], runs: Sequence[float] = ()) -> float:
    """One run's relative noise on ``metric_id``: the larger of the floor held over its sampling (floor x
    sqrt(``FLOOR_SAMPLES`` / n), never above the floor), the CV of its repeats, and its samples' standard error."""
    return max(held(metric_id, len(samples)), cv(runs), standard_error(samples))


def band(metric_id: str, old_samples: Sequence[float], new_samples: Sequence[float],
         runs: Sequence[Sequence[float]] = ()) -> float:
    """The relative change (0.31 for 31%) within which two runs' values of ``metric_id`` differ by chance.

    Method::

        sigma = sqrt(v_old^2 + v_new^2),  v = ``run_noise``: max(floor x sqrt(3 / n), CV of repeats, standard error)

    A change beyond ``SIGMAS`` (3) sigma comes by chance about once in 740 comparisons (normal spread); the samples'
    CV alone misses the drift between runs on a busy node (issue 35). Details: docs/reports.md.
    """
    old_runs, new_runs = (tuple(runs) + ((), ()))[:2]
    old, new = run_noise(metric_id, old_samples, old_runs), run_noise(metric_id, new_samples, new_runs)
    return SIGMAS * math.sqrt(old * old + new * new)


def samples_to_tell(metric_id: str, samples: Sequence[float], within: float, runs: Sequence[float] = ()) -> float | None:
    """How many times longer a run would sample ``metric_id`` for ``band`` to fall to ``within`` (0.2), both runs alike:
    the samples that would hold its floor and its standard error to it (``run_noise``: floor x sqrt(3 / n'), error x
    sqrt(n / n')), over the n it took (a run of 2 samples, held as 3 by ``run_noise``, needs 6x to reach 12); None
    where its repeats' spread alone is wider, which no duration narrows."""
    needed = within / SIGMAS / math.sqrt(2)  # each run's noise, both alike
    if needed <= 0 or cv(runs) > needed:
        return None
    taken = max(len(samples), 1)
    wanted = max(FLOOR_SAMPLES * (floor(metric_id).cv / needed) ** 2, taken * (standard_error(samples) / needed) ** 2)
    return max(1.0, wanted / taken)
