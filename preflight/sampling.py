"""The one budgeted sampling loop every measuring check uses.

The method is torch.utils.benchmark's ``Timer.adaptive_autorange``: warm up, then take
samples until their relative interquartile range is small enough or the time budget is
spent, never fewer than ``min_samples``. fio's ``ramp_time`` is the same warm-up idea.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

from preflight.io.dataset import Spent
from preflight.measurement import Stats


# The shortest time a figure's kept samples may span and still be a figure of the device: the time ``sample`` holds
# even a fast target to in the shortest storage part (``min_time_s``, half of its 1 s). Over a few milliseconds the
# scheduler sets a rate as much as the device does: on a busy 2-core node, small_files read as 100 files in 6-17 ms
# moved -52% to +106% between unchanged runs (docs/benchmarks.md, 'The Quick start's small_files'), where 1 s parts
# moved 0.6-6% (issue 35). A figure sampled over less says so where its check sums its windows' time
# (``short_warning``: storage's small_files, the DataLoader's pools), and ``preflight diff`` does not compare it.
MIN_SPAN_S = 0.5
SHORT = "short: "  # how the warning of a figure sampled over less than MIN_SPAN_S begins (``short_warning``)


def short_warning(what: str, span_s: float, fix: str = "") -> str:
    """The warning of a figure whose kept samples spanned ``span_s`` seconds (``what``: "1 sample of 100 files"),
    "" from ``MIN_SPAN_S`` up. It begins with ``SHORT``; its first clause (up to ";") is what ``preflight diff``
    shows."""
    if span_s >= MIN_SPAN_S:
        return ""
    span = f"{span_s * 1e3:.0f} ms" if span_s < 1 else f"{span_s:.2f} s"
    return (f"{SHORT}{what} in {span}; under {MIN_SPAN_S:g} s the scheduler sets such a figure as much as the device, "
            f"so it is rough and `preflight diff` does not compare it{': ' + fix if fix else ''}")


def files_for_span(rate_per_s: float, share: float) -> int:
    """How many files a dataset needs for a part that reads ``share`` of them (0.1) at ``rate_per_s`` to span
    ``MIN_SPAN_S``: for ``short_warning``'s fix."""
    return math.ceil(rate_per_s * MIN_SPAN_S / share)


class Samples(NamedTuple):
    values: tuple[float, ...]
    stopped: str  # why sampling stopped, for the report


def sample(
    measure_once: Callable[[], float],
    budget_s: float,
    *,
    warmup: int = 1,
    min_samples: int = 3,
    max_samples: int = 50,
    target_spread: float = 0.05,
    min_time_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Samples:
    """Repeat ``measure_once`` within ``budget_s`` seconds and return its samples.

    Algorithm::

        call measure_once() `warmup` times and discard the results
        repeat:
            append measure_once()
            stop if n >= min_samples and IQR/median <= target_spread
                 and at least min_time_s has passed                    ("spread ...")
            stop if n >= max_samples                                   ("max samples")
            stop if n >= min_samples and the next sample would overrun ("budget spent")

    ``measure_once`` returns one sample in the caller's unit (a rate: higher is better).
    The minimum sample count wins over the budget: a check's timeout, not this loop, is
    what bounds a pathologically slow target.

    ``min_time_s`` (default: half of ``budget_s``) keeps a fast target from stopping on
    its first few samples: on a shared machine a tenth of a second can fall wholly in a
    lull or a burst of other tenants' load (in one back-to-back comparison on a shared
    2-CPU machine, bench/noise.py's CV over ten runs went from 27-30% to 12-18%). It is
    fio's ``time_based`` idea: a throughput is measured over a stated time, not over as
    few operations as possible.

    A reader of the dataset's files raises ``io.dataset.Spent`` when the files it may read once are all
    read: sampling stops there, whatever the rules above (its reason is the stop), and where the pass was
    spent before any kept sample, the warm-up's sample is kept: it too was a first touch.
    """
    min_time_s = budget_s / 2 if min_time_s is None else min_time_s
    start = clock()
    warm: list[float] = []  # the last warm-up's sample: kept only if the pass is spent before another
    values: list[float] = []
    try:
        for _ in range(warmup):
            warm = [measure_once()]
    except Spent as spent:
        if not warm:
            raise  # nothing measured at all: the caller says what the pass held
        return Samples(tuple(warm), f"{spent} in the warm-up")
    while True:
        before = clock()
        try:
            values.append(measure_once())
        except Spent as spent:
            values = values or warm
            if not values:
                raise  # the pass ended before the first sample: the caller measures what it held
            return Samples(tuple(values), f"{spent} after {len(values)} samples")
        took = clock() - before
        n = len(values)
        if n >= min_samples:
            spread = Stats.of(tuple(values)).spread
            if spread <= target_spread and clock() - start >= min_time_s:
                return Samples(tuple(values), f"spread {spread:.1%} <= {target_spread:.0%} after {n} samples")
            if n >= max_samples:
                return Samples(tuple(values), f"max {max_samples} samples taken (spread {spread:.1%})")
            if clock() - start + took > budget_s:
                return Samples(tuple(values), f"time budget {budget_s:g}s spent after {n} samples (spread {spread:.1%})")
