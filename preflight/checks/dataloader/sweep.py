"""The worker count where the DataLoader's throughput stops growing (``worker_sweep``; checks layer).

A fresh pool per count (1, 2, 4, ... up to the cgroup's CPUs and ``num_workers``) in an equal share of the sweep's
phase (``dataloader.phases``: it splits ``duration``). Where the knee's epoch would not fit the memory limit, the most
workers below it that fit. ``pipeline.sweep`` uses the same ``Curve.knee``::

    for n in counts: windows[n] = windows(fresh loader with num_workers=n, duration / len(counts)),
                                  each at most its pool's sustained rate where a burst was taken out (``pool_windows``)
                     rate[n] = mean of windows[n]
    best = the count of the highest mean rate
    knee = min(n for n in counts if max(windows[n]) >= 0.95 * min(windows[best]))
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from preflight.checks.base import Budget
from preflight.host.cpus import WAITING_SHARE, available_cpus, for_waiting
from preflight.loading.loop import BURST_NAMED, BatchPuller, pool_rate, windows
from preflight.loading.source import Source, loader_for
from preflight.loading.sweep import KNEE_SHARE, Curve, counts, sweep
from preflight.measurement import Measurement

def pool_windows(puller: BatchPuller, workers: int, share: Budget) -> tuple[float, ...]:
    """samples/s of each window of the fresh pool ``puller`` in ``share``, each at most the pool's sustained rate
    where that fell ``BURST_NAMED`` or more below the windows' count (``loop.pool_rate``): a throttle serves a freshly
    started pool a burst (issue 32 case 5) that would lift the count above the throughput's."""
    taken = windows(puller, max(1, workers), share, min_windows=2)
    rate, _, burst = pool_rate(puller, taken)
    ceiling = rate if burst >= BURST_NAMED else math.inf
    return tuple(min(w.samples_per_s, ceiling) for w in taken)


def loader_rate(options: Mapping[str, Any], source: Source) -> Callable[[int, Budget], tuple[float, ...]]:
    """samples/s of each window of a fresh loader over ``source`` with ``options`` but ``n`` workers
    (``pool_windows``)."""

    def rate_at(workers: int, share: Budget) -> tuple[float, ...]:
        counted = loader_for({**options, "num_workers": workers}, source).fresh()
        puller = BatchPuller(counted.dataloader, count=counted.count)
        try:
            return pool_windows(puller, workers, share)
        finally:
            puller.close()  # its workers exit before the next count's start, as the throughput's pools do

    return rate_at


def recommended(curve: Curve, workers: int, method: str,
                fits: Callable[[int], bool | None] = lambda n: None) -> Measurement:
    """``recommended_num_workers``: the knee, or the most workers below it whose projected epoch ``fits`` the memory
    limit (``memory.Watch.fits``), with the curve and what changing ``workers`` to it gains in the note."""
    if len(curve.counts) < 2:  # a knee is never told from one point
        return Measurement("recommended_num_workers", None, "", method=f"{method}, swept at {curve.shown()}",
                           reason=f"{curve.shown()}: only one worker count could be measured, and no knee is told "
                                  f"from one")
    knee = curve.knee()
    fitting = [n for n in curve.counts if n <= knee and fits(n)] if fits(knee) is False else []
    now, best = curve.rate(workers), curve.rate(knee)
    if fitting:
        chosen, knee_rate = fitting[-1], best
        knee, best = chosen, curve.rate(chosen)
        advice = (f"num_workers {chosen}: the most workers that fit the memory limit over an epoch; {curve.knee()} "
                  f"workers (the knee, {knee_rate / best - 1:+.0%} samples/s) are projected past it")  # type: ignore[operator]
    elif knee > workers and now and best:
        advice = f"raise num_workers from {workers} to {knee}: {best / now - 1:+.0%} samples/s"
    elif knee > workers:  # num_workers 0 (loading in the main process): the sweep starts at 1, so no gain to quote
        advice = f"raise num_workers from {workers} to {knee}: {best:.0f} samples/s there"
    elif knee < workers:
        advice = (f"more workers than {knee} gain nothing here and cost memory: num_workers {knee} delivers within "
                  f"{1 - KNEE_SHARE:.0%} of {workers}")
    else:
        advice = f"num_workers {workers} is where throughput stops growing"
    if fits(knee) is False and not fitting:
        advice += "; every count swept is projected past the memory limit over an epoch"
    # The note, not the reason, shows under an unjudged (info) row; the method carries the curve into the JSON.
    return Measurement("recommended_num_workers", float(knee), "", reason=f"{curve.shown()}; {advice}",
                       note=f"{curve.shown()}; {advice}", hint=advice,
                       method=f"{method}, swept at {len(curve.counts)} worker counts, each a fresh pool for an "
                       f"equal share of duration: {curve.shown()}")


def measure(options: Mapping[str, Any], source: Source, budget: Budget, workers: int, method: str,
            fits: Callable[[int], bool | None] = lambda n: None,
            shm_fits: Callable[[int], bool] = lambda n: True, cpu_share: float | None = None) -> Measurement:
    """Sweep the worker counts for ``options`` over ``source`` and recommend one that ``fits``; a count whose batches
    in flight would not fit /dev/shm (``shm_fits``) is not started, and the method names it. A loader whose
    samples took under ``WAITING_SHARE`` of their time on a CPU (``cpu_share``) is swept past the CPUs the cgroup
    allows, up to ``for_waiting``: waiting workers use no CPU quota (pytorch/pytorch#19836)."""
    cpus = available_cpus()
    waits = cpu_share is not None and cpu_share < WAITING_SHARE
    every = counts(workers, cpus, for_waiting(cpu_share, cpus) if waits else 0)  # type: ignore[arg-type]
    if waits:
        method += (f"; swept past the {cpus:g} CPUs allowed: a batch took {cpu_share:.0%} of its loading time on a "
                   f"CPU, waiting the rest")
    swept = [n for n in every if shm_fits(n)] or every[:1]
    curve = sweep(loader_rate(options, source), swept, budget)
    left_out = [n for n in every if n not in swept]
    if left_out:
        method += (f"; not swept at {', '.join(map(str, left_out))} workers: their batches in flight would not fit "
                   f"/dev/shm (shm_headroom)")
    return recommended(curve, workers, method, fits)


def used(options: Mapping[str, Any], workers: int, method: str, cpu_share: float | None = None) -> Measurement:
    """``workers``: the worker count the loader ran with, and where ``auto`` took it from: 70 % of the CPUs the
    cgroup allows, or for a loader whose batch took under ``WAITING_SHARE`` of its time on a CPU (``cpu_share``),
    the workers that keep that share of them busy (``for_waiting``)."""
    cpus = available_cpus()
    if options["num_workers"] != "auto":
        why = "num_workers as configured"
    elif cpu_share is not None and cpu_share < WAITING_SHARE:
        why = (f"num_workers: auto: one batch took {cpu_share:.0%} of its loading time on a CPU, waiting the rest, so "
               f"{workers} workers keep 70 % of the {cpus:g} CPUs the cgroup allows busy (at most {max(8, 2 * math.ceil(cpus))})")
    else:
        why = f"num_workers: auto, 70 % of the {cpus:g} CPUs the cgroup allows"
    return Measurement("workers", float(workers), "", method=f"{why}; {method}")
