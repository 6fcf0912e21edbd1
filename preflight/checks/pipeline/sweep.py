"""The worker count where the pipeline's input_bound reaches its floor (the pipeline's ``worker_sweep``).

Method: the dataloader sweep (``Curve.knee``) on the share of the model's samples/s the fed step keeps (100 % -
input_bound, MLPerf Storage's AU): at each count a fresh pool feeds the step, alone and fed interleaved as the check's
windows (``model.measuring.interleaved``), in an equal share of the sweep's phase (``pipeline.phases``). ::

    for n in counts: au[n] = 100 - input_bound of each pair of interleaved(step alone, step fed by n workers)
    floor = the count of the highest median au (the lowest input_bound)
    knee = min(n for n in counts if max(au[n]) >= 0.95 * min(au[floor]))
"""

from __future__ import annotations

import statistics
from typing import Callable

from preflight.checks.base import Budget
from preflight.loading import sweep as loader_sweep
from preflight.loading.sweep import Curve
from preflight.host.cpus import available_cpus
from preflight.measurement import Measurement


def measure(fed_share_at: Callable[[int, Budget], tuple[float, ...]], workers: int, budget: Budget, device: str,
            bound_now: float, method: str) -> Measurement:
    """``recommended_num_workers`` for a loader that ran with ``workers`` (input_bound ``bound_now``, %).

    ``fed_share_at(n, share)``: 100 % - input_bound of each pair of windows at ``n`` workers within ``share``.
    """
    worker_counts = loader_sweep.counts(workers, available_cpus())
    curve = loader_sweep.sweep(fed_share_at, worker_counts, budget, centre=statistics.median)
    return recommended(curve, workers, device, bound_now, method)


def recommended(curve: Curve, workers: int, device: str, bound_now: float, method: str) -> Measurement:
    """The knee of ``curve`` (rates: 100 % - input_bound), with the input_bound curve and the gain in the note;
    ``bound_now``: input_bound at ``workers`` where the sweep did not measure it (``num_workers: 0``)."""
    knee = curve.knee()
    bounds = dict(zip(curve.counts, (100 - rate for rate in curve.rates)))
    now = bounds.get(workers, bound_now)
    floor = min(bounds, key=bounds.__getitem__)
    if knee > workers:
        advice = f"raise num_workers from {workers} to {knee}: input_bound {now:.0f}% -> {bounds[knee]:.0f}%"
    elif knee < workers and knee == floor:
        advice = (f"more workers than {knee} gain nothing here and cost memory: input_bound is at its floor, "
                  f"{bounds[knee]:.0f}%, with {knee}")
    elif knee < workers:
        advice = (f"more workers than {knee} gain nothing here and cost memory: input_bound {bounds[knee]:.0f}% at "
                  f"{knee} is within the noise of its floor ({bounds[floor]:.0f}% at {floor})")
    elif knee == floor:
        advice = f"num_workers {workers} is where input_bound reaches its floor"
    else:  # the median falls further at more workers, but their windows overlap these: not told apart
        advice = (f"num_workers {workers} is within the noise of input_bound's floor ({bounds[floor]:.0f}% at "
                  f"{floor}): their windows overlap here; a longer duration can tell them apart")
    shown = (f"input_bound at {', '.join(map(str, curve.counts))} workers: "
             f"{', '.join(f'{bound:.0f}%' for bound in bounds.values())}")
    # As the dataloader's row: the note shows under an info row, the method carries the curve into the JSON.
    return Measurement("recommended_num_workers", float(knee), "", device=device, reason=f"{shown}; {advice}",
                       note=f"{shown}; {advice}", hint=advice,
                       method=f"{method}, swept at {len(curve.counts)} worker counts, each a fresh pool feeding the "
                       f"step, alone and fed interleaved for an equal share of the sweep's phase of duration, the "
                       f"knee where input_bound is within the noise of its floor: {shown}")
