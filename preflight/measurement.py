"""Measurements are objects: what was measured, how, the raw samples and their statistics.

A frozen record computing its statistics once, when built (``torch.utils.benchmark.Measurement``); checks produce
them, only ``verdict.py`` compares them with thresholds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

# IQR / median above which a measurement is flagged noisy, as fio and torch.utils.benchmark warn.
NOISY_SPREAD = 0.10

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


def combine(repeats: Sequence[Measurement]) -> Measurement:
    """One measurement from the same metric measured in several runs of its check (``repeats: N``).

    The value is the median of the runs' values (fio's and MLPerf Storage's run rules), ``samples`` every run's
    samples, ``runs`` each run's value. One unmeasured run makes the whole unmeasured (fail closed); a text is the
    last run's.

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
        stopped=f"median of {len(values)} runs", warnings=warnings, runs=values,
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
