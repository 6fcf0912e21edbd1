"""The one budgeted sampling loop every measuring check uses (torch.utils.benchmark's ``Timer.adaptive_autorange``;
fio's ``ramp_time`` for the warm-up)."""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple, Sequence

from preflight.io.dataset import Spent
from preflight.measurement import MIN_SPAN_S, SHORT, Stats


def short_warning(what: str, span_s: float, fix: str = "") -> str:
    """The warning of a figure whose kept samples spanned ``span_s`` seconds (``what``: "1 sample of 100 files"), ""
    from ``MIN_SPAN_S`` up; it begins with ``SHORT``, and ``preflight diff`` shows its first clause."""
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
    decided: Callable[[Sequence[float], float], bool] | None = None,
    max_s: float | None = None,
    more: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
) -> Samples:
    """Repeat ``measure_once`` (one sample, higher is better) within ``budget_s`` seconds; its samples.

    Algorithm::

        call measure_once() `warmup` times and discard the results
        repeat:
            append measure_once()
            with a threshold (`decided`, ``Budget.decider``; span: since the first kept sample began):
                stop if decided(samples, span) and the next sample would end past budget_s ("decided ...")
                stop if the next sample would overrun max_s                          ("max_duration ...")
            without one:
                stop if n >= min_samples and IQR/median <= target_spread
                     and at least min_time_s has passed                              ("spread ...")
                stop if n >= min_samples and the next sample would overrun budget_s  ("budget spent")
            stop if n >= max_samples                                                 ("max samples")

    A sequential verdict (hyperfine's and criterion's "sample until the estimate is tight", fio's ``steadystate``):
    a figure its interval decides stops at ``budget_s`` (``duration``: the minimum), one it does not is measured on
    up to ``max_s`` (``max_duration``).
    ``min_samples`` wins over the budget (the timeout bounds a slow target); ``min_time_s`` (half the budget; fio's
    ``time_based``) keeps a fast target from stopping in a lull of other load. A reader's ``io.dataset.Spent`` stops
    it, unless the figure is undecided and ``more()`` found it more of the pass to read; spent before any kept
    sample, the warm-up's (a first touch too) is kept.
    """
    # Decided figures run their whole duration, the minimum (issue 44): what `duration` buys is what a diff of two
    # runs compares, and the duration it names as the one that would tell must buy samples.
    decided_after_s = budget_s if min_time_s is None else min_time_s
    min_time_s = budget_s / 2 if min_time_s is None else min_time_s
    longest = max(budget_s, max_s or 0.0) if decided is not None else budget_s
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
    first = clock()
    while True:
        before = clock()
        try:
            values.append(measure_once())
        except Spent as spent:
            values = values or warm
            if not values:
                raise  # the pass ended before the first sample: the caller measures what it held
            if decided is not None and not decided(values, clock() - first) and clock() - start < longest and more():
                continue  # undecided: the reader took more of the pass
            return Samples(tuple(values), f"{spent} after {len(values)} samples")
        took = clock() - before
        n = len(values)
        elapsed = clock() - start
        if decided is not None:
            if n >= 2 and elapsed + took > decided_after_s and decided(values, clock() - first):
                return Samples(tuple(values), f"decided after {n} samples in {elapsed:.2f} s: the interval clears "
                                              f"the threshold")
            if n >= max_samples:
                return Samples(tuple(values), f"max {max_samples} samples taken")
            if n >= min_samples and elapsed + took > longest:
                verdict = "decided" if decided(values, clock() - first) else "undecided"
                return Samples(tuple(values), f"max_duration {longest:g}s spent after {n} samples ({verdict})")
            continue
        if n >= min_samples:
            spread = Stats.of(tuple(values)).spread
            if spread <= target_spread and elapsed >= min_time_s:
                return Samples(tuple(values), f"spread {spread:.1%} <= {target_spread:.0%} after {n} samples")
            if n >= max_samples:
                return Samples(tuple(values), f"max {max_samples} samples taken (spread {spread:.1%})")
            if elapsed + took > budget_s:
                return Samples(tuple(values), f"time budget {budget_s:g}s spent after {n} samples (spread {spread:.1%})")
