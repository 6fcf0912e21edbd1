"""Measurements are objects: what was measured, how, the raw samples and their statistics.

A frozen record computing its statistics once, when built (``torch.utils.benchmark.Measurement``); checks produce
them, only ``verdict.py`` compares them with thresholds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

# IQR / median above which a measurement is flagged noisy, as fio and torch.utils.benchmark warn.
NOISY_SPREAD = 0.10
# The shortest span of kept samples that is a figure of the device, not of the scheduler or of a throttle's start-up
# burst (issues 35, 44; docs/benchmarks.md, 'The Quick start's small_files'): a shorter figure warns (``SHORT``), is
# never decided by its interval, and ``preflight diff`` skips it.
MIN_SPAN_S = 0.5
SHORT = "short: "  # how the warning of a figure sampled over less than MIN_SPAN_S begins
# Student's t at 95 % one-sided (a two-sided 90 % interval), by degrees of freedom; 1.645 past the table (normal).
_T90 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
        1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)


def interval(samples: Sequence[float], center: float) -> tuple[float, float] | None:
    """The 90 % interval of a figure from its samples; None for fewer than two.

    A figure that is its samples' median (storage's windows) gets the median's distribution-free interval: the
    k-th lowest and highest samples, k the largest with binomial coverage >= 90 % (Conover, "Practical
    Nonparametric Statistics", 3.2; the whole range below 8 samples), which one burst window does not widen. Any
    other ``center`` (the DataLoader's pools, weighed by time) gets ``center`` +/- t(0.95, n-1) x s / sqrt(n), within
    the samples' range. Windows of one pass share its state (a cache, a throttle), so for them either is a floor
    (docs/checks.md, "A verdict that holds").
    """
    import statistics

    n = len(samples)
    if n < 2:
        return None
    ordered = sorted(samples)
    if n >= 3 and center == statistics.median(ordered):
        k = max(1, max((k for k in range(1, n // 2 + 1) if _binomial_tail(n, k - 1) <= 0.05), default=1))
        return ordered[k - 1], ordered[n - k]
    half = (_T90[n - 2] if n - 2 < len(_T90) else 1.645) * statistics.stdev(samples) / n ** 0.5
    # Never past the samples' range: a few skewed windows (workers still starting) stretch a t-interval below the
    # slowest window, even below zero, where no window read.
    return max(center - half, ordered[0]), min(center + half, ordered[-1])


def _binomial_tail(n: int, k: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    import math

    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


# A figure with no interval (one sample) or a short one is decided only where its bound lies outside value / 3 to
# value x 3: short small_files figures scattered from 0.43x to 1.87x of fio's over the same files (docs/benchmarks.md).
ROUGH_FACTOR = 3.0
# While more of the pass can be read, sampling stops on such a figure only past 10x: a read throttle's start-up burst
# read 497 MB/s through a 20 MB/s limit in one short sample (issue 44), which a 3x band would have passed at 100 MB/s.
EXTEND_FACTOR = 10.0


def band(samples: Sequence[float], center: float, short: bool = False,
         factor: float = ROUGH_FACTOR) -> tuple[float, float] | None:
    """Where a figure may lie, for its verdict: its 90 % ``interval``, or, over one sample or a span under
    ``MIN_SPAN_S`` (``short``), ``center`` / ``factor`` to ``center`` x ``factor``; None without samples."""
    if not samples:
        return None
    if short or len(samples) < 2:
        return (center / factor, center * factor) if center >= 0 else (center * factor, center / factor)
    return interval(samples, center)


def clears(bounds: tuple[float | None, float | None], lows_highs: tuple[float, float] | None) -> bool:
    """Whether an interval lies wholly on one side of each bound of ``bounds`` (min, max): False for none."""
    if lows_highs is None:
        return False
    low, high = lows_highs
    return all(bound is None or not low < bound <= high for bound in bounds)

# What a figure was measured on (DESIGN.md "Every result says what it measured"), in the words reports use.
# Checks decide it from evidence (the file's st_dev and mount source, the batch sampler's indices), never from
# what a heuristic meant to read. Only ``DATASET_SUBJECTS`` can pass a dataset threshold (``verdict``).
SUBJECTS = {
    "dataset": "the dataset's own files",
    "job_dataset": "the job's own Dataset",
    "scratch_on_dataset_fs": "scratch data verified on the dataset's filesystem and device",
    "scratch_elsewhere": "scratch data on another filesystem or device than the dataset's",
    "synthetic": "synthetic samples, not the dataset",
    "no_dataset": "no dataset named (the working directory)",
    "unverified": "data not verified to be the dataset's",
    "reread": ("the dataset's files read a second time in this run, where a cache below the page cache (a FUSE "
               "client's, a network filesystem's, a file-backed loop device's host) serves rereads: not the job's "
               "first epoch"),
}
DATASET_SUBJECTS = ("dataset", "job_dataset", "scratch_on_dataset_fs")


@dataclass(frozen=True)
class Stats:
    """Summary of a measurement's samples: n, median, quartiles and ``spread`` = (q3 - q1) / median (0 for fewer than
    two samples)."""

    n: int
    median: float
    q1: float
    q3: float
    minimum: float
    maximum: float
    spread: float

    @classmethod
    def of(cls, samples: tuple[float, ...]) -> Stats:
        import statistics  # here, not at the top: `preflight validate` loads the check tables, never a sample

        ordered = sorted(samples)
        if len(ordered) >= 2:
            q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        else:
            q1 = q3 = ordered[0]
        median = statistics.median(ordered)
        spread = (q3 - q1) / median if median and len(ordered) >= 2 else 0.0
        return cls(len(ordered), median, q1, q3, ordered[0], ordered[-1], spread)


@dataclass(frozen=True)
class Measurement:
    """One metric measured once on one target.

    Attributes:
        metric: the metric's name in its check's METRICS table.
        value: a number in ``unit``, a text (a GPU name), or None when unmeasured (``reason`` says why).
        unit: the unit symbol (``units.UNITS``); "" for counts and texts.
        device: the target when a check measures several (``cuda:0``), else None.
        samples: raw samples in ``unit``; without ``value``, the value is their median.
        method: how it was measured, for people ("O_DIRECT, 1 MiB blocks, 1 reader").
        reason: why it could not be measured, or a caveat on the value.
        stopped: why sampling stopped ("spread below 5%", "time budget spent").
        stats: statistics of ``samples``, computed when the record is built.
        warnings: noise and plausibility warnings found while measuring.
        applicable: False where the metric does not exist here (NVML's NOT_SUPPORTED): judged ``skip``.
        runs: with ``repeats``, each run's value (``samples`` then holds every run's); else empty.
        cache_bound: the value may come from memory, not the device; never passes silently.
        hint: a fix that follows from what was measured (replaces the metric's static hint).
        note: where the value came from, shown under its row ("on scratch data: ./ holds 3 files").
        subject: what it was measured on (``SUBJECTS``; "" when not about data); only ``DATASET_SUBJECTS`` pass a
            dataset threshold.
        floor: the least half-width of its interval, a fraction of the value: the spread between runs that samples
            all taken in one run cannot show (the check's run-to-run figure from ``bench/noise.py``); 0 for none.
    """

    metric: str
    value: float | str | None = None
    unit: str = ""
    device: str | None = None
    samples: tuple[float, ...] = ()
    method: str = ""
    reason: str = ""
    stopped: str = ""
    warnings: tuple[str, ...] = ()
    applicable: bool = True
    runs: tuple[float, ...] = ()
    cache_bound: bool = False
    hint: str = ""
    note: str = ""
    subject: str = ""
    floor: float = 0.0
    stats: Stats | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.samples:
            object.__setattr__(self, "samples", tuple(float(s) for s in self.samples))
            stats = Stats.of(self.samples)
            object.__setattr__(self, "stats", stats)
            if self.value is None:
                object.__setattr__(self, "value", stats.median)
            note = f"noisy: interquartile range is {stats.spread:.0%} of the median over {stats.n} samples"
            # With `runs`, the value is the runs' median, so `combine` judges noise over the runs instead.
            if stats.spread > NOISY_SPREAD and not self.runs and note not in self.warnings:
                object.__setattr__(self, "warnings", (*self.warnings, note))
        if self.value is None and not self.reason:
            raise ValueError(f"{self.metric}: a measurement without a value needs a reason")
        if self.subject and self.subject not in SUBJECTS:
            raise ValueError(f"{self.metric}: unknown subject {self.subject!r}, expected one of {sorted(SUBJECTS)}")

    @property
    def measured(self) -> bool:
        return self.value is not None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The value's 90 % interval from its samples (``interval``), at least ``floor`` either side; None for a
        text, or under two samples."""
        if not isinstance(self.value, (int, float)):
            return None
        return at_least(interval(self.samples, float(self.value)), float(self.value), self.floor)

    @property
    def band(self) -> tuple[float, float] | None:
        """Where the value may lie, for its verdict: ``band`` of its samples, at least ``floor`` either side."""
        if not isinstance(self.value, (int, float)):
            return None
        return at_least(band(self.samples, float(self.value), self.short), float(self.value), self.floor)

    @property
    def short(self) -> bool:
        """Its kept samples spanned under ``MIN_SPAN_S``: the scheduler's or a burst's figure as much as the device's."""
        return any(w.startswith(SHORT) for w in self.warnings)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``from_dict`` rebuilds the same record."""
        data = dataclasses.asdict(self)
        data.pop("stats")
        data["samples"] = list(self.samples)
        data["warnings"] = list(self.warnings)
        data["runs"] = list(self.runs)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(**{**data, "samples": tuple(data["samples"]), "warnings": tuple(data["warnings"]),
                      "runs": tuple(data.get("runs", ()))})


def at_least(lows_highs: tuple[float, float] | None, value: float, floor: float) -> tuple[float, float] | None:
    """``lows_highs`` widened to ``value`` -/+ ``floor`` x |value| where narrower; None stays None."""
    if lows_highs is None or not floor:
        return lows_highs
    half = floor * abs(value)
    return min(lows_highs[0], value - half), max(lows_highs[1], value + half)


def combine(repeats: Sequence[Measurement]) -> Measurement:
    """One measurement from the same metric measured in several runs of its check (``repeats: N``).

    The value is the median of the runs' values (fio's and MLPerf Storage's run rules), ``samples`` every run's
    samples, ``runs`` each run's value, ``floor`` the first's over sqrt(runs) (the runs' own spread is in the samples).
    One unmeasured run makes the whole unmeasured (fail closed); a text is the last run's.

    Raises:
        ValueError: ``repeats`` is empty or mixes metrics or devices.
    """
    if not repeats:
        raise ValueError("combine() needs at least one measurement")
    first, last = repeats[0], repeats[-1]
    if any((m.metric, m.device) != (first.metric, first.device) for m in repeats):
        raise ValueError(f"combine() got several metrics: {sorted({m.metric for m in repeats})}")
    if len(repeats) == 1:
        return first
    for number, m in enumerate(repeats, 1):
        if not m.measured:
            return dataclasses.replace(m, reason=f"run {number} of {len(repeats)}: {m.reason}")
    if not all(isinstance(m.value, (int, float)) for m in repeats):
        return last
    values = tuple(float(m.value) for m in repeats)  # type: ignore[arg-type]
    warnings = tuple(dict.fromkeys(w for m in repeats for w in m.warnings if not w.startswith("noisy:")))
    stats = Stats.of(values)
    spread = stats.spread
    if spread > NOISY_SPREAD:
        warnings += (f"noisy: interquartile range of the {len(values)} runs is {spread:.0%} of their median",)
    return Measurement(
        first.metric, stats.median, first.unit, first.device,
        samples=tuple(s for m in repeats for s in m.samples), method=first.method,
        reason=next((m.reason for m in repeats if m.reason), ""), note=last.note, subject=_weakest(repeats),
        stopped=f"median of {len(values)} runs", warnings=warnings, runs=values, floor=first.floor / len(values) ** 0.5,
    )


def _weakest(repeats: Sequence[Measurement]) -> str:
    """The runs' subject, or the first that is not the dataset's: one run on scratch makes the median unverified."""
    return next((m.subject for m in repeats if m.subject not in DATASET_SUBJECTS), repeats[-1].subject)


def unmeasurable(metric: str, reason: str, unit: str = "", device: str | None = None) -> Measurement:
    """A measurement of ``metric`` that could not be taken, with the one-line ``reason``."""
    return Measurement(metric=metric, value=None, unit=unit, device=device, reason=reason)


def not_applicable(metric: str, reason: str, unit: str = "", device: str | None = None) -> Measurement:
    """``metric`` does not exist on this target (the hardware lacks it); judged ``skip``, never pass or fail."""
    return Measurement(metric=metric, value=None, unit=unit, device=device, reason=reason, applicable=False)


# How far a metric's figure moves between runs of one node. A run's windows and pools share its moment (the load
# beside it, the cache's state), so its own samples show less spread than runs do: ``RUN_TO_RUN`` holds each metric's
# CV between runs; ``preflight diff`` bands a change by it (``report.noise``) and the verdict widens a figure's interval
# to it (``verdict_floor``). docs/checks.md, "A verdict that holds".
Z90 = 1.645  # a normal spread's 90% two-sided quantile: the verdict's intervals are 90%
# The verdict floor's quantile: 99% two-sided. At a threshold on a node's own mean, a 90% floor decides 5% of runs
# each way, so 20 runs decide both ways 4 times in 10; at 99% (0.5% each way) under once in 100.
Z99 = 2.576
# Metrics whose floor the verdict holds: the read and write rates, whose run-to-run CV is the device's (or the
# loader's) steady spread; the DataLoader's other rates take its throughput's (``checks.dataloader.measuring``).
# Left out: rand_read and the latency percentiles, whose runs are bimodal (CV 22-43%, fio's own 40%): a floor that
# wide would turn every near miss into a warning; ``repeats`` narrows them instead.
VERDICT_FLOORED = ("storage.seq_read", "storage.small_files", "storage.small_files_bandwidth", "storage.seq_write",
                   "dataloader.throughput")


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
_STABILITY = ("docs/benchmarks.md, 'verdict_stability' (60 runs a load over 30,000 files, the gate alone, every file "
              "read once, 2026-12-06)")

# metric id (check.metric) -> its floor: the largest run-to-run CV measured where the device set the figure;
# the runs left out, and why: docs/benchmarks.md, 'Noise on a busy node'.
RUN_TO_RUN: dict[str, Floor] = {
    "storage.seq_read": Floor(0.093, f"{_IDLE}: 6.6% {_PARTS}; {_BUSY}: 0.7%; {_NOISE_BUSY}: 6.9%"),
    "storage.rand_read": Floor(0.546, f"{_IDLE}: 38.6% (bimodal, fio's own 40.2%) {_PARTS}; {_BUSY}: 0.0%; "
                                      f"{_NOISE_BUSY}: 8.5%"),
    "storage.rand_read_p50": Floor(0.351, f"{_IDLE}: 24.8% {_PARTS}; {_BUSY}: 13.2%; {_NOISE_BUSY}: 4.7%"),
    "storage.rand_read_p99": Floor(0.608, f"{_IDLE}: 43.0% {_PARTS}; {_BUSY}: 1.3%; {_NOISE_BUSY}: 41.7%"),
    "storage.small_files": Floor(0.135, f"{_STABILITY}: 13.5% quiet and busy (10.8%, 12.3% the day before); "
                                        f"{_IDLE}: 4.3% {_PARTS}; {_BUSY}: 0.7%"),
    "storage.small_files_bandwidth": Floor(0.135, f"as storage.small_files (its files' bytes / the same time); "
                                                  f"{_IDLE}: 4.3% {_PARTS}; {_BUSY}: 0.6%"),
    "storage.seq_write": Floor(0.078, f"{_IDLE}: 5.5% {_PARTS}"),
    "storage.fsync_p99": Floor(0.304, f"{_IDLE}: 21.5% {_PARTS}"),
    "dataloader.throughput": Floor(0.134, f"{_STABILITY}: 6.6% quiet, 13.4% busy (6.3-8.6%, 9.2-12.5% before); "
                                          f"{_IDLE}: 10.6%; {_POOLS}: 8.5%; {_BUSY}: 7.6%"),
    "dataloader.bandwidth": Floor(0.134, f"as dataloader.throughput; {_IDLE}: 10.6%; {_BUSY}: 7.6%"),
    # throughput / a constant (samples_per_gpu x gpus): the throughput's spread
    "dataloader.throughput_vs_required": Floor(0.134, f"as dataloader.throughput (throughput / a constant); "
                                                      f"{_BUSY}: 7.6%"),
}
# A metric measured nowhere above: issue 14's stability target, which bench/noise.py holds the gate to.
_UNMEASURED = "not measured run to run: issue 14's stability target (bench/noise.py holds the gate to it)"
# The samples the floors' runs took: a storage part of 1 s stops at its third window (``sampling.sample``). A run that
# sampled a figure n times longer holds it to floor / sqrt(n), as ``check_wall_time`` found the CV grow by sqrt(2)
# where a part's time halved (docs/benchmarks.md): the duration that tells (``samples_to_tell``).
FLOOR_SAMPLES = 3


def target(metric_id: str) -> float:
    """The run-to-run CV the gate is held to for ``metric_id`` (``check.metric``, issue 14): 10% for the DataLoader,
    else 5%. ``bench/noise.py`` judges stability by it."""
    return 0.10 if metric_id.startswith("dataloader.") else 0.05


def floor(metric_id: str) -> Floor:
    """The run-to-run CV ``preflight diff`` assumes for ``metric_id`` (``check.metric``) at least: its
    ``RUN_TO_RUN`` entry, else the stability target (``target``) with that said as the source."""
    return RUN_TO_RUN.get(metric_id) or Floor(target(metric_id), _UNMEASURED)


def held(metric_id: str, samples: int) -> float:
    """``metric_id``'s run-to-run CV for a run that took ``samples`` samples: its ``floor`` x sqrt(``FLOOR_SAMPLES`` /
    n), never above the floor (``check_wall_time`` found the CV grow by sqrt(2) where a part's time halved)."""
    return floor(metric_id).cv * math.sqrt(FLOOR_SAMPLES / max(samples, FLOOR_SAMPLES))


def verdict_floor(metric_id: str) -> float:
    """The least half-width of ``metric_id``'s interval at its verdict, a fraction of its value: ``Z99`` x its
    ``floor`` CV, where one node's runs fall 99 times in 100, a spread one run's windows cannot show; 0 for a metric
    outside ``VERDICT_FLOORED``. Not narrowed by more samples: runs that read on to 3x the windows spread as much as
    runs that stopped at ``duration`` (docs/benchmarks.md, 'verdict_stability')."""
    if metric_id not in VERDICT_FLOORED:
        return 0.0
    return Z99 * floor(metric_id).cv
