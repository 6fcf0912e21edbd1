"""The dataloader check's worker sweep against a hand-written loop over the same worker counts, and its cost.

Usage: python3 bench/worker_sweep.py [--duration 3] [--workers 4]

A Dataset that sleeps 10 ms per sample (I/O-bound) is swept by the check (``worker_sweep: true``:
1, 2, 4 workers up to the CPUs and ``--workers``, each a fresh pool for an equal share of
``--duration``), then by hand: for each count a plain DataLoader (shuffled, batch 8) iterated for
the same share of time after the same warm-up, samples counted. Target: the same knee (the fewest
workers within 5 % of the best). The check's wall time is printed against ``--duration``: what the
sweep costs on top of the throughput's own measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from preflight.checks.base import Budget  # noqa: E402
from preflight.checks.dataloader import sweep  # noqa: E402
from preflight.loading.source import Source  # noqa: E402
from preflight.loading.user import Job  # noqa: E402
from preflight.config import coerce_option  # noqa: E402
from preflight.checks import dataloader  # noqa: E402


class Sleeps(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> int:
        time.sleep(0.01)
        return index


def by_hand(workers: int, seconds: float) -> float:
    loader = torch.utils.data.DataLoader(Sleeps(), batch_size=8, shuffle=True, num_workers=workers)
    batches = iter(loader)
    for _ in range(2 * workers):  # the same warm-up as the check: 2 batches per worker
        next(batches)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        count += len(next(batches))
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    options = {o.name: coerce_option(o, None, o.name) for o in dataloader.OPTIONS}
    options.update(batch_size=8, num_workers=args.workers)
    source = Source(None, "Sleeps", "", "job_dataset", Job(Sleeps(), None, None))
    counts = sweep.counts(args.workers, len(os.sched_getaffinity(0)))
    start = time.perf_counter()
    checked = sweep.sweep(sweep.loader_rate(options, source), counts, Budget(args.duration, 120.0))
    wall = time.perf_counter() - start
    hand = sweep.Curve(tuple(counts), tuple(by_hand(n, args.duration / len(counts)) for n in counts))
    print(f"check:   {checked.shown()}; knee {checked.knee()}")
    print(f"by hand: {hand.shown()}; knee {hand.knee()}")
    print(f"the sweep took {wall:.1f} s for duration {args.duration:g} s ({len(counts)} pools)")
    same = checked.knee() == hand.knee()
    print("same knee: OK" if same else "different knees: MISSED")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
