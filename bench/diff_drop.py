"""Does `preflight diff` catch a 36% drop in sequential reads behind a blkio throttle? (issue 44)

Usage: python3 bench/diff_drop.py [--pairs 10] [--duration 2s] [--fail-on 20%] [--dir DIR]
       (as root: it makes a loop device, mounts it, makes a blkio cgroup and drops the page cache)

An ImageNet-shaped folder (10 classes x 100 files of 110 kB) on a fresh ext4 loop volume is read by
``preflight run --only storage`` three times per pair inside a blkio cgroup: twice at 30 MB/s (an unchanged
pair) and once at 19.2 MB/s (36% less). Each pair is diffed at --fail-on; the bench prints each pair's
seq_read line for the drop, whether the drop was caught (REGRESSED, exit 1), whether the unchanged pair
failed, and the totals. The target: every drop caught, no unchanged pair failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.founding_table import drop_caches, loop_volume, throttled  # noqa: E402
from tests import datasets  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RATE, DROPPED = 30_000_000, 19_200_000  # bytes/s: a 36% drop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--duration", default="2s")
    parser.add_argument("--fail-on", default="20%")
    parser.add_argument("--dir", default=None, help="where the volume's image goes (default: a temporary folder)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1")
    with tempfile.TemporaryDirectory(dir=args.dir) as work, contextlib.ExitStack() as stack:
        volume = stack.enter_context(loop_volume(work, 300 << 20))
        data = datasets.imagenet(volume.mountpoint / "train", classes=10, per_class=100)
        config = Path(work) / "thresholds.yaml"
        config.write_text(f"version: 1\ndefaults: {{retries: 0}}\nchecks:\n  storage:\n    path: {data}\n"
                          f"    duration: {args.duration}\n    seq_read: {{min: 5 MB/s}}\n")

        def run(rate: int, name: str) -> str:
            report = str(Path(work) / name)
            with throttled(volume.device, rate) as throttle:
                drop_caches()
                subprocess.run(throttle.wrap([sys.executable, "-m", "preflight", "run", "-c", str(config), "--only",
                                              "storage", "--json", report]), capture_output=True, cwd=REPO, env=env,
                               timeout=240)
            return report

        def diff(old: str, new: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "preflight", "diff", old, new, "--fail-on", args.fail_on],
                                  capture_output=True, text=True, cwd=REPO, env=env)

        caught = unchanged_failed = 0
        for index in range(args.pairs):
            full, again, dropped = run(RATE, f"a{index}.json"), run(RATE, f"b{index}.json"), run(DROPPED, f"d{index}.json")
            cut, same = diff(again, dropped), diff(full, again)
            line = next(line for line in cut.stdout.splitlines() if line.startswith("storage.seq_read "))
            hit = cut.returncode == 1 and "REGRESSED" in line
            caught, unchanged_failed = caught + hit, unchanged_failed + (same.returncode != 0)
            values = [next(r["value"] for r in json.loads(Path(p).read_text())["results"] if r["metric"] == "seq_read")
                      for p in (full, again, dropped)]
            print(f"pair {index + 1:2d}: seq_read {values[0]:6.1f} {values[1]:6.1f} -> {values[2]:6.1f} MB/s  "
                  f"{'caught' if hit else 'missed'}; unchanged pair exit {same.returncode}: {' '.join(line.split()[3:])}",
                  flush=True)
        print(f"drops caught: {caught} of {args.pairs}; unchanged pairs failed: {unchanged_failed} of {args.pairs}")
    return 0 if caught == args.pairs and not unchanged_failed else 1


if __name__ == "__main__":
    sys.exit(main())
