"""The dataloader check's raw rate against a plain multi-process read of the same 10,000 files.

Usage: python3 bench/dataloader_vs_plain.py [--workers 2] [--rounds 5]

Makes 10,000 files of 8 KiB in 100 folders (ImageNet-style, in a temporary directory on
the working directory's filesystem), then alternates, round by round, who goes first: the plain read
(N processes, open+read+close with O_DIRECT, shuffled order, as ``small_files``) and the
dataloader check (``num_workers`` N, batch 64, raw bytes), so that other load on the
machine falls on both alike. Target: the median ratio within 20%.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import alternating, defaults, scratch_root  # noqa: E402
from preflight.checks import dataloader  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402
from preflight.io.dataset_walk import DataFile  # noqa: E402
from preflight.checks.storage.small_files import file_loop  # noqa: E402
from preflight.io.parallel import run_loops  # noqa: E402
from preflight.sampling import sample  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with scratch_root() as root:
        chunk = os.urandom(8192 + 64)
        for index in range(10_000):
            folder = os.path.join(root, f"n{index % 100:03d}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"{index:05d}.bin"), "wb") as handle:
                handle.write(chunk[index % 64:][:8192])
        os.sync()
        files = [DataFile(os.path.join(d, n), 8192) for d, _, names in os.walk(root) for n in names]
        random.Random(0).shuffle(files)
        options = defaults("dataloader", path=root, num_workers=args.workers, batch_size=64)

        def plain_window() -> float:
            tally = run_loops(file_loop(files, args.workers, "O_DIRECT"), args.workers, 1, 0.3)
            return tally.ops / tally.elapsed_s

        print(f"10,000 files of 8 KiB, {args.workers} processes / workers, batch 64, O_DIRECT, shuffled")
        print(f"{'round':>5} {'plain files/s':>14} {'loader samples/s':>17} {'ratio':>6}")
        def plain() -> float:
            return statistics.median(sample(plain_window, 1.2, min_samples=3).values)

        def loader() -> float:
            measured = {m.metric: m for m in dataloader.measure(options, Budget(1.2, 60))}
            return float(measured["throughput"].value)  # type: ignore[arg-type]

        rounds = alternating(args.rounds, plain, loader, after=lambda run, p, d: print(
            f"{run:>5} {p:>14.0f} {d:>17.0f} {d / p:>6.2f}", flush=True))
        print(f"median ratio {statistics.median(d / p for p, d in rounds):.2f} (target 0.80-1.20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
