"""fio as the reference for the storage benches: its jobs, warm caches, paired rounds, the table.

Shared by ``storage_vs_fio.py`` (one data file) and ``storage_vs_fio_imagenet.py`` (an
ImageNet-shaped folder). Synchronous engines, as preflight's loops are, except rand_read's
libaio (``rand_read_args``).

Paired rounds: this 2-core VM is shared, and a single pair of runs swung by up to 2x. Each
round runs preflight and fio back to back, so that other load falls on both alike, and
swaps who goes first each round (on a VM the first reader after a warm-up was seen to be
favoured, 7 rounds of 9). The figure compared is the median of the rounds' ratios.
"""

from __future__ import annotations

import json
import subprocess
from statistics import median
from typing import Callable, Iterable, NamedTuple, Sequence

from bench.common import in_turn

TARGET = (0.85, 1.15)  # issue 11: each metric within 15% of fio


def fio(seconds: float, *args: str) -> dict:
    """Run fio for ``seconds``, time-based, and return the JSON record of its one reported group.

    ``args`` are one job's options, or global options followed by several ``--name=...``
    jobs (fio applies an option to the job named before it): the jobs are reported as one.
    """
    timed = [] if any(a.startswith("--size=128M") for a in args) else ["--time_based", f"--runtime={seconds:g}"]
    jobs = args if any(a.startswith("--name=") for a in args) else ("--name=bench", *args)
    done = subprocess.run(["fio", "--output-format=json", "--group_reporting", *timed, *jobs],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench: fio {' '.join(args[:4])} failed: {done.stderr.strip()[-300:]}")
    out = done.stdout
    return json.loads(out[out.index("{"):])["jobs"][0]


def warm(names: str | Iterable[str]) -> None:
    """Buffered reads of whole files: after this the page cache holds them, so a figure that
    ignored O_DIRECT/fadvise would show up as far above fio's."""
    for name in [names] if isinstance(names, str) else names:
        with open(name, "rb") as handle:
            while handle.read(8 << 20):
                pass


def seq_read_args(size: int, readers: int) -> list[str]:
    """preflight's seq_read over one file of ``size`` bytes (given with --filename): ``readers``
    contiguous spans of 1 MiB O_DIRECT reads."""
    span = size // readers // (1 << 20) * (1 << 20)
    return ["--rw=read", "--direct=1", "--bs=1M", "--ioengine=psync", f"--numjobs={readers}", f"--size={span}",
            f"--offset_increment={span}"]


def rand_read_args(depth: int) -> list[str]:
    """preflight's rand_read: ``depth`` 4 KiB O_DIRECT random reads in flight from as many processes
    as preflight uses (at most 4): on a shared CPU, 4 busy processes get more CPU than fio's one,
    which flattered preflight by up to 1.5x under load."""
    processes = min(4, depth)
    return ["--rw=randread", "--direct=1", "--bs=4k", "--ioengine=libaio", f"--numjobs={processes}",
            f"--iodepth={depth // processes}"]


def rand_read_sync_args(depth: int) -> list[str]:
    """preflight's rand_read method itself: ``depth`` synchronous readers, one request in flight
    each (as bench/noise.py). Against libaio's, this shows what the engine costs in CPU."""
    return ["--rw=randread", "--direct=1", "--bs=4k", "--ioengine=psync", f"--numjobs={depth}"]


def files_per_second(job: dict) -> float:
    """Whole-file jobs issue one request per file: requests per second of runtime."""
    return job["read"]["total_ios"] / (job["read"]["runtime"] / 1e3)


def latency_ms(job: dict, percentile: str) -> float:
    """A read completion-latency percentile ("50.000000", "99.000000") in ms."""
    return job["read"]["clat_ns"]["percentile"][percentile] / 1e6


Figures = dict[str, float]  # metric label -> value, from one run of one side


class Pair(NamedTuple):
    """Figures for the same metrics from preflight and from fio, on the same bytes."""

    ours: Callable[[], Figures]
    fio: Callable[[], Figures]


def paired_rounds(rounds: int, pairs: Sequence[Pair], after: Callable[[int], None] = lambda run: None
                  ) -> dict[str, list[tuple[float, float]]]:
    """Run every pair ``rounds`` times, preflight first in odd rounds and fio first in even ones.

    Returns metric label -> [(ours, fio) per round]; ``after(run)`` is called after each round.
    """
    series: dict[str, list[tuple[float, float]]] = {}
    for run in range(1, rounds + 1):
        for pair in pairs:
            ours, theirs = in_turn(run, pair.ours, pair.fio)
            for label, value in ours.items():
                series.setdefault(label, []).append((value, theirs[label]))
        after(run)
    return series


def median_ratio(series: Sequence[tuple[float, float]]) -> float:
    return median(ours / theirs for ours, theirs in series)


def verdict(ratio: float) -> str:
    low, high = TARGET
    return "within 15%" if low <= ratio <= high else f"MISSES 15% ({'over' if ratio > high else 'under'} fio)"


Row = tuple  # (name, preflight, fio, unit, target[, ratio]): without a ratio, preflight / fio


def print_table(rows: Sequence[Row]) -> None:
    width = max(42, *(len(row[0]) for row in rows))
    print(f"{'metric':<{width}} {'preflight':>10} {'fio':>10} {'unit':<8} {'ratio':>6}  target")
    for name, ours_value, fio_value, unit, target, *paired in rows:
        ratio = paired[0] if paired else ours_value / fio_value
        print(f"{name:<{width}} {ours_value:>10.4g} {fio_value:>10.4g} {unit:<8} {ratio:>6.2f}  {target}")
