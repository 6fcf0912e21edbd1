"""Each check's wall time against its configured ``duration``, the start-up it states, and its bound.

Usage: python3 bench/check_wall_time.py [DATA_DIR] [--runs 2]

Runs ``python3 -m preflight run --only CHECK`` with the bundled thresholds.yaml and one
``duration`` at a time (``--set CHECK.duration=...``) over DATA_DIR, by default the README's
sample dataset written by ``preflight make-dataset`` in a scratch directory on the working
directory's filesystem; also storage with its writes judged (5 timed parts instead of 3) and
the dataloader with one worker pool instead of 8. Each row is one run: the check's own wall
time (the report's ``duration_s``), what its configuration predicts (``Timing``: the measuring
time ``duration`` buys plus the check's stated start-up) and the bound issue 26 sets, 2 x the
measuring time plus the start-up. Exit 1 when any run is over its bound.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import imagenet_sample, run_preflight, scratch_root  # noqa: E402
from preflight import config  # noqa: E402
from preflight.checks import CHECKS  # noqa: E402
from preflight.checks.base import timing  # noqa: E402

WRITES = ("storage.seq_write.min=1 MB/s", "storage.fsync_p99.max=1000 ms")
CASES = (  # (check, label, durations, extra --set assignments)
    ("shm", "defaults", ("1s", "5s"), ()),
    ("storage", "reads (3 parts)", ("1s", "3s", "6s"), ()),
    ("storage", "+ writes (5 parts)", ("5s",), WRITES),
    ("dataloader", "8 worker pools", ("1s", "3s", "6s"), ()),
    ("dataloader", "1 worker pool", ("3s",), ("dataloader.worker_pools=1",)),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", help="dataset directory (default: the README's sample, written here)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each case")
    args = parser.parse_args()
    over = 0
    with scratch_root() as scratch:
        data = args.data or imagenet_sample(scratch)
        print(f"bundled thresholds.yaml, --only CHECK, on DATA_DIR={data if args.data else 'a make-dataset sample'}; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        print(f"{'check':11} {'case':19} {'duration':>8} {'wall':>6} {'command':>8} {'start-up':>9} {'expected':>9} "
              f"{'bound':>7}  verdict")
        for check, label, durations, extra in CASES:
            for duration in durations:
                sets = [f"{check}.duration={duration}", *extra]
                overrides = [arg for assignment in sets for arg in ("--set", assignment)]
                instance = config.load(str(config.bundled_path()), sets, environ={"DATA_DIR": data}).select([check])
                instance = instance.instances[0]
                times = timing(CHECKS[check], instance.options, instance.budget)
                for _ in range(args.runs):
                    run = run_preflight("-c", str(config.bundled_path()), "--only", check, *overrides, data_dir=data)
                    wall = run.instance_s()[check]
                    within = wall <= times.bound_s
                    over += not within
                    print(f"{check:11} {label:19} {duration:>8} {wall:5.1f}s {run.wall_s:7.1f}s {times.startup_s:8.1f}s "
                          f"{times.expected_s:8.1f}s {times.bound_s:6.1f}s  {'within' if within else 'OVER'}",
                          flush=True)
    print("wall: the check's own (report duration_s); command: the whole `preflight run` (interpreter, config, "
          "worker start); bound: 2 x measuring + start-up")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
