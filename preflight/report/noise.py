"""Report layer: how far a metric moves by chance: the CV, the stability target, and the change band of ``diff``.

``bench/noise.py`` holds each metric's CV (stdev / mean) to ``target`` (issue 14); ``preflight diff`` judges a change
against ``band``, floored by ``RUN_TO_RUN`` (docs/benchmarks.md, docs/reports.md "Comparing two runs").
"""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple, Sequence

# The control-chart (Shewhart) limit: at 2 sigma one diff in five of ten metrics would fail by chance (issue 35).
SIGMAS = 3.0


class Floor(NamedTuple):
    """The run-to-run CV of one metric's figure (one run's value, as its gate judged it)."""

    cv: float
    source: str  # where it was measured


# Where the floors were measured: the sections of docs/benchmarks.md that hold each figure.
_IDLE = "docs/benchmarks.md, 'Noise: bench/noise.py' (10 runs, 2026-12-01)"
_PARTS = ("x sqrt(2): those runs gave each storage metric 2 s, a part now gets 1 s, and 'check_wall_time' expects "
          "the CV to grow by up to sqrt(2) where the device is the noise")
_BUSY = "docs/benchmarks.md, 'diff_pairs' (20 runs under 2 busy loops behind a 30 MB/s throttle, 2026-12-02)"
_NOISE_BUSY = "docs/benchmarks.md, 'Noise on a busy node' (bench/noise.py --busy 2, 10 runs, 2026-12-02)"
_POOLS = "docs/benchmarks.md, 'Noise: bench/noise.py', the pools table (8 fresh worker pools per run, the default)"

# metric id (check.metric) -> its floor: the largest run-to-run CV measured where the device set the figure;
# the runs left out, and why: docs/benchmarks.md, 'Noise on a busy node'.
RUN_TO_RUN: dict[str, Floor] = {
    "storage.seq_read": Floor(0.093, f"{_IDLE}: 6.6% {_PARTS}; {_BUSY}: 0.7%; {_NOISE_BUSY}: 6.9%"),
    "storage.rand_read": Floor(0.546, f"{_IDLE}: 38.6% (bimodal, fio's own 40.2%) {_PARTS}; {_BUSY}: 0.0%; "
                                      f"{_NOISE_BUSY}: 8.5%"),
    "storage.rand_read_p50": Floor(0.351, f"{_IDLE}: 24.8% {_PARTS}; {_BUSY}: 13.2%; {_NOISE_BUSY}: 4.7%"),
    "storage.rand_read_p99": Floor(0.608, f"{_IDLE}: 43.0% {_PARTS}; {_BUSY}: 1.3%; {_NOISE_BUSY}: 41.7%"),
    "storage.small_files": Floor(0.061, f"{_IDLE}: 4.3% {_PARTS}; {_BUSY}: 0.7%"),
    "storage.small_files_bandwidth": Floor(0.061, f"{_IDLE}: 4.3% {_PARTS}; {_BUSY}: 0.6%"),
    "storage.seq_write": Floor(0.078, f"{_IDLE}: 5.5% {_PARTS}"),
    "storage.fsync_p99": Floor(0.304, f"{_IDLE}: 21.5% {_PARTS}"),
    "dataloader.throughput": Floor(0.106, f"{_IDLE}: 10.6%; {_POOLS}: 8.5%; {_BUSY}: 7.6%"),
    "dataloader.bandwidth": Floor(0.106, f"{_IDLE}: 10.6%; {_BUSY}: 7.6%"),
    # throughput / a constant (samples_per_gpu x gpus): the throughput's spread
    "dataloader.throughput_vs_required": Floor(0.106, f"as dataloader.throughput (throughput / a constant); "
                                                      f"{_BUSY}: 7.6%"),
}
# A metric measured nowhere above: issue 14's stability target, which bench/noise.py holds the gate to.
_UNMEASURED = "not measured run to run: issue 14's stability target (bench/noise.py holds the gate to it)"
# From two values the stdev is off by half or more one time in three: too unsure to widen the band.
MIN_SAMPLES = 3
# The samples the floors' runs took: a storage part of 1 s stops at its third window (``sampling.sample``). A run that
# sampled a figure n times longer holds it to floor / sqrt(n), as ``check_wall_time`` found the CV grow by sqrt(2)
# where a part's time halved (docs/benchmarks.md): the duration that tells (``samples_to_tell``).
FLOOR_SAMPLES = 3


def cv(series: Sequence[float]) -> float:
    """stdev / mean of ``series``; 0 for fewer than two values or a constant 0 (a flag that never changes)."""
    if len(series) < 2:
        return 0.0
    mean = statistics.fmean(series)
    stdev = statistics.stdev(series)
    return stdev / mean if mean else (0.0 if stdev == 0 else float("inf"))


def target(metric_id: str) -> float:
    """The run-to-run CV the gate is held to for ``metric_id`` (``check.metric``, issue 14): 10% for the DataLoader,
    else 5%. ``bench/noise.py`` judges stability by it."""
    return 0.10 if metric_id.startswith("dataloader.") else 0.05


def floor(metric_id: str) -> Floor:
    """The run-to-run CV ``preflight diff`` assumes for ``metric_id`` (``check.metric``) at least: its
    ``RUN_TO_RUN`` entry, else the stability target (``target``) with that said as the source."""
    return RUN_TO_RUN.get(metric_id) or Floor(target(metric_id), _UNMEASURED)


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
    held = floor(metric_id).cv * math.sqrt(FLOOR_SAMPLES / max(len(samples), FLOOR_SAMPLES))
    return max(held, cv(runs), standard_error(samples))


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
