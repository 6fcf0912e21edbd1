"""Report layer: how far a metric moves by chance: the coefficient of variation, the stability target, and the
band a change between two runs must leave.

Two uses. ``bench/noise.py`` asks whether the gate is stable run to run: each metric's CV against
``target`` (issue 14: 5%, 10% for the DataLoader, whose worker pools add their own scheduling noise).
``preflight diff`` asks whether a metric changed between two runs: ``band``, a difference judged against
the spread between runs, whose floor per metric (``RUN_TO_RUN``) is a run-to-run CV measured on a busy
node, each with its source. The CV (stdev / mean) is the figure MLPerf Storage and fio users quote for
run-to-run stability.
"""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple, Sequence

# Standard deviations a change must exceed: the control-chart (Shewhart) limit. A run judges about ten
# metrics; at 2 sigma an unchanged node would fail one of them in about one diff of five (issue 35).
SIGMAS = 3.0


class Floor(NamedTuple):
    """The run-to-run CV of one metric's value (one run's figure, as its gate judged it) on a busy node."""

    cv: float
    source: str  # where it was measured


_BUSY = "docs/benchmarks.md, 'Noise on a busy node': bench/noise.py --busy 2, 10 runs at load 4-6 (2026-12-02)"
_IDLE = "docs/benchmarks.md, 'Noise: bench/noise.py': 10 runs idle (2026-12-01)"
_LOADED = "docs/benchmarks.md, check_wall_time's 8 paired rounds at load 10-11, 'after' column (2026-12-01)"

# metric id (check.metric) -> its floor: the largest run-to-run CV measured for it in the sources named.
RUN_TO_RUN: dict[str, Floor] = {
    "storage.seq_read": Floor(0.066, f"{_IDLE}: 6.6%; {_BUSY}: ?"),
    "storage.rand_read": Floor(0.386, f"{_IDLE}: 38.6% (bimodal, fio's own 40.2%); {_BUSY}: ?"),
    "storage.rand_read_p50": Floor(0.248, f"{_IDLE}: 24.8%; {_BUSY}: ?"),
    "storage.rand_read_p99": Floor(0.430, f"{_IDLE}: 43.0%; {_BUSY}: ?"),
    "storage.small_files": Floor(0.10, f"{_IDLE}: 4.3%; {_BUSY}: ?"),
    "storage.small_files_bandwidth": Floor(0.10, f"{_IDLE}: 4.3%; {_BUSY}: ?"),
    "storage.seq_write": Floor(0.055, f"{_IDLE}: 5.5%"),
    "storage.fsync_p99": Floor(0.215, f"{_IDLE}: 21.5%"),
    "dataloader.throughput": Floor(0.106, f"{_IDLE}: 10.6%; {_BUSY}: ?"),
    "dataloader.bandwidth": Floor(0.106, f"{_IDLE}: 10.6%; {_BUSY}: ?"),
    # throughput / a constant (samples_per_gpu x gpus): the throughput's spread
    "dataloader.throughput_vs_required": Floor(0.106, "as dataloader.throughput (it is throughput / a constant)"),
}
# A metric measured nowhere above: issue 14's stability target, which bench/noise.py holds the gate to.
_UNMEASURED = "not measured run to run: issue 14's stability target (bench/noise.py holds the gate to it)"


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
    """The relative standard error of a run's figure from its own samples: CV / sqrt(n); 0 for under two samples."""
    return cv(samples) / math.sqrt(len(samples)) if len(samples) > 1 else 0.0


def band(metric_id: str, old_samples: Sequence[float], new_samples: Sequence[float],
         runs: Sequence[Sequence[float]] = ()) -> float:
    """The relative change (0.31 for 31%) within which two runs' values of ``metric_id`` differ by chance.

    Method, a difference of two runs' figures against the spread between runs. Each run's figure
    varies from one run to the next by a CV, the largest of:

    - the metric's floor (``floor``): the run-to-run CV measured for it on a busy node, which holds
      the run's own sampling error too;
    - the CV of the run's own repeats (``runs``: a report of ``repeats: N`` holds its N figures, a
      direct measure of this node's spread between runs);
    - its samples' standard error (``standard_error``: CV / sqrt(n)), where they are that uncertain.

    The difference of two independent runs then has the relative standard deviation

        sigma = sqrt(v_old^2 + v_new^2),  v = max(floor, CV of repeats, standard error)

    and a change beyond ``SIGMAS`` (3) sigma is one that chance gives an unchanged node about once in
    740 comparisons in the worse direction (normal spread). The one-run spread alone (the samples' CV)
    misses the drift between runs on a busy node: issue 35's -19% of ``small_files`` with ±5%.
    """
    between = max([floor(metric_id).cv] + [cv(figures) for figures in runs])
    old, new = (max(between, standard_error(samples)) for samples in (old_samples, new_samples))
    return SIGMAS * math.sqrt(old * old + new * new)
