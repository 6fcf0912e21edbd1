"""Report layer: how far a metric moves by chance: the coefficient of variation, and the band a change must leave.

One definition for ``bench/noise.py`` (is the gate stable run to run?) and ``preflight diff``
(did a metric change between two runs?). The CV (stdev / mean) is the figure MLPerf Storage and
fio users quote for run-to-run stability; the floors are the run-to-run CVs the gate is held to
(issue 14): 5% for storage and the other checks, 10% for the DataLoader, whose worker pools add
their own scheduling noise.
"""

from __future__ import annotations

import statistics
from typing import Sequence

# Band = max(floor, SPREADS x the larger CV of the two runs' samples): two CVs either side of the
# mean hold about 95% of a normal spread, so a change inside it is what the run's own samples do.
SPREADS = 2.0


def cv(series: Sequence[float]) -> float:
    """stdev / mean of ``series``; 0 for fewer than two values or a constant 0 (a flag that never changes)."""
    if len(series) < 2:
        return 0.0
    mean = statistics.fmean(series)
    stdev = statistics.stdev(series)
    return stdev / mean if mean else (0.0 if stdev == 0 else float("inf"))


def floor(metric_id: str) -> float:
    """The run-to-run CV the gate is held to for ``metric_id`` (``check.metric``): 10% for the DataLoader, else 5%."""
    return 0.10 if metric_id.startswith("dataloader.") else 0.05


def band(metric_id: str, *sample_sets: Sequence[float]) -> float:
    """The relative change (0.12 for 12%) within which two values of ``metric_id`` differ by chance:
    ``max(floor, SPREADS x the largest CV of sample_sets)``."""
    return max([floor(metric_id)] + [SPREADS * cv(samples) for samples in sample_sets])
