"""Wall time of the bundled default gate, as the README runs it, against what its configuration predicts.

Usage: python3 bench/default_battery.py [DATA_DIR] [--runs 3]

Runs ``python3 -m preflight run`` with the bundled thresholds.yaml (every check: the GPU ones
fail fast without a GPU) over DATA_DIR, by default the README's sample dataset written by
``preflight make-dataset`` in a scratch directory on the working directory's filesystem. For
each run it prints the command's wall time against the 12 s target (issue 26, on the 2-CPU
development VM) and, per check instance, its own wall time against its configured ``duration``:
the time expected (what ``duration`` buys plus the check's stated start-up, ``Timing``) and the
bound, 2 x the measuring time plus the start-up.
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

TARGET_S = 12.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", help="dataset directory (default: the README's sample, written here)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with scratch_root() as scratch:
        data = args.data or imagenet_sample(scratch)
        instances = config.load(str(config.bundled_path()), environ={"DATA_DIR": data}).instances
        print(f"bundled thresholds.yaml on DATA_DIR={data if args.data else 'a make-dataset sample'}; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        print(f"{'':6}{'check':11} {'wall':>6} {'duration':>9} {'start-up':>9} {'expected':>9} {'bound':>7}  verdict")
        over = 0
        for number in range(1, args.runs + 1):
            run = run_preflight("-c", str(config.bundled_path()), data_dir=data)
            took = run.instance_s()
            for instance in instances:
                times = timing(CHECKS[instance.check], instance.options, instance.budget)
                wall = took.get(instance.name)
                within = wall is not None and wall <= times.bound_s
                over += not within
                print(f"run {number} {instance.name:11} {wall or 0:5.1f}s {instance.duration_s:8g}s "
                      f"{times.startup_s:8.1f}s {times.expected_s:8.1f}s {times.bound_s:6.1f}s  "
                      f"{'within' if within else 'OVER'}")
            over += run.wall_s > TARGET_S
            print(f"run {number} whole command {run.wall_s:.1f}s (exit {run.exit_code}): "
                  f"{'within' if run.wall_s <= TARGET_S else 'OVER'} the {TARGET_S:g} s target")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
