"""The worker count where the DataLoader's throughput stops growing (``worker_sweep``).

Method: the loader is measured at 1, 2, 4, ... workers up to the CPUs the cgroup allows (``cpus``)
and the configured ``num_workers``, each count a fresh pool for an equal share of the sweep's phase
of ``duration`` (at least 2 windows after warm-up, as the throughput's pools; ``dataloader.phases``),
so the sweep splits ``duration`` with the loader's phase rather than adding to it, plus a pool start
per count. The knee is the fewest workers within 5 % of the best samples/s, told apart only where
their windows do not overlap: more workers than that gain nothing here and cost memory (each is a
forked copy of the Dataset's pages, ``memory``); where the knee's projected epoch would not fit the
memory limit, the most workers below it that fit are recommended instead. The pipeline check's
sweep (``pipeline.sweep``) finds its knee the same way (``sweep``, ``Curve.knee``) on a different
rate: the share of the model's samples/s the fed step keeps. ::

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
from preflight.host.cpus import available_cpus
from preflight.loading.loop import BURST_NAMED, BatchPuller, pool_rate, windows
from preflight.loading.source import Source, loader_for
from preflight.loading.sweep import KNEE_SHARE, Curve, counts, sweep
from preflight.measurement import Measurement

def pool_windows(puller: BatchPuller, workers: int, share: Budget) -> tuple[float, ...]:
    """samples/s of each window of the fresh pool ``puller`` in ``share``; where the pool's sustained rate fell
    ``BURST_NAMED`` or more below its windows' count over their time (``loop.pool_rate``), each window at most
    that rate. Each count's pool starts after the last one closed, so a throttle or a burst-credit volume serves
    it a burst at its start that its steady rate does not hold, as it serves the throughput's pools (issue 32 case
    5): behind the traced 286 MB/s throttle the first window read 1.28x the slices' rate. Kept, it would lift the
    count's mean above the throughput at the same count, and its fastest window past another count's slowest."""
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
    # The curve and the advice go in the note, which the table shows under an unjudged (info) row, as the reason
    # is not; the method carries the curve into the JSON too.
    return Measurement("recommended_num_workers", float(knee), "", reason=f"{curve.shown()}; {advice}",
                       note=f"{curve.shown()}; {advice}", hint=advice,
                       method=f"{method}, swept at {len(curve.counts)} worker counts, each a fresh pool for an "
                       f"equal share of duration: {curve.shown()}")


def measure(options: Mapping[str, Any], source: Source, budget: Budget, workers: int, method: str,
            fits: Callable[[int], bool | None] = lambda n: None,
            shm_fits: Callable[[int], bool] = lambda n: True) -> Measurement:
    """Sweep the worker counts for ``options`` over ``source`` and recommend one that ``fits`` (the module's method).

    A count whose batches in flight would not fit /dev/shm (``shm_fits``, ``shared_memory.Need.fits``) is not
    started: its workers would die with a bus error; the method names the counts left out."""
    every = counts(workers, available_cpus())
    swept = [n for n in every if shm_fits(n)] or every[:1]
    curve = sweep(loader_rate(options, source), swept, budget)
    left_out = [n for n in every if n not in swept]
    if left_out:
        method += (f"; not swept at {', '.join(map(str, left_out))} workers: their batches in flight would not fit "
                   f"/dev/shm (shm_headroom)")
    return recommended(curve, workers, method, fits)


def used(options: Mapping[str, Any], workers: int, method: str) -> Measurement:
    """``workers``: the worker count the loader ran with, and where ``auto`` took it from."""
    why = (f"num_workers: auto, 70 % of the {available_cpus():g} CPUs the cgroup allows" if options["num_workers"] == "auto"
           else "num_workers as configured")
    return Measurement("workers", float(workers), "", method=f"{why}; {method}")
