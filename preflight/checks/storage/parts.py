"""How the storage check spends ``duration``: its timed parts, which of them run, and each one's share.

Kept apart from the measuring code so that the runner's progress line can say how long the
check will take (``storage.timing``) without importing it.
"""

from __future__ import annotations

from preflight.checks.base import Budget

MIN_WINDOWS = 3  # as sampling.sample's min_samples
MIN_WINDOW_S = 0.25  # every window forks its readers: a shorter one would time their start as much as the device
MIN_PART_S = (1 + MIN_WINDOWS) * MIN_WINDOW_S  # a warm-up window and MIN_WINDOWS windows: 1 s
# The timed parts, each with the metrics that share its measurement. The writes run only where the
# configuration judges one of their metrics (``Budget.wants``): they write scratch data on the dataset's volume.
READ_PARTS = {"seq_read": ("seq_read",), "rand_read": ("rand_read", "rand_read_p50", "rand_read_p99"),
              "small_files": ("small_files", "small_files_bandwidth")}
WRITE_PARTS = {"seq_write": ("seq_write",), "fsync_p99": ("fsync_p99",)}


def timed_parts(budget: Budget) -> list[str]:
    """The timed parts that run under ``budget``: the reads always, each write only when its metric is asked for."""
    return [*READ_PARTS, *(part for part, metrics in WRITE_PARTS.items() if budget.wants(*metrics))]


def part_s(budget: Budget) -> float:
    """Each timed part's share of ``duration`` in seconds, warm-up included: an equal share, at least ``MIN_PART_S``."""
    return max(MIN_PART_S, budget.duration_s / len(timed_parts(budget)))
