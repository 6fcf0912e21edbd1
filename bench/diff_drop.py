"""Does `preflight diff` catch a 36% drop in sequential reads behind a blkio throttle? (issue 44)

Usage: python3 bench/diff_drop.py [--pairs 10] [--fail-on 20%] [--dir DIR]
       (as root: it makes a loop device, mounts it, makes a blkio cgroup and drops the page cache)

Eight 32 MiB shards (WebDataset-style: files seq_read streams) on a fresh ext4 loop volume are read by
``preflight run --only storage`` three times per pair inside a blkio cgroup: twice at 30 MB/s (an unchanged
pair) and once at 19.2 MB/s (36% less). First one pair at the bundled `duration` (3s), whose diff says what
it can tell and names the duration that would tell; then --pairs pairs at that duration, each diffed at
--fail-on. The bench prints each pair's seq_read line, whether the drop was caught (REGRESSED, exit 1),
whether the unchanged pair failed, and the totals. The target: every drop caught, no unchanged pair failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.founding_table import drop_caches, loop_volume, throttled  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RATE, DROPPED = 30_000_000, 19_200_000  # bytes/s: a 36% drop
SHARDS, SHARD_BYTES = 8, 32 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--fail-on", default="20%")
    parser.add_argument("--dir", default=None, help="where the volume's image goes (default: a temporary folder)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1")
    with tempfile.TemporaryDirectory(dir=args.dir) as work, contextlib.ExitStack() as stack:
        volume = stack.enter_context(loop_volume(work, (SHARDS * SHARD_BYTES * 3) // 2))
        data = volume.mountpoint / "shards"
        data.mkdir()
        for index in range(SHARDS):
            (data / f"shard-{index:04d}.tar").write_bytes(os.urandom(SHARD_BYTES))

        def run(rate: int, name: str, duration: str) -> str:
            config = Path(work) / "thresholds.yaml"
            config.write_text(f"version: 1\ndefaults: {{retries: 0}}\nchecks:\n  storage:\n    path: {data}\n"
                              f"    duration: {duration}\n    seq_read: {{min: 5 MB/s}}\n")
            report = str(Path(work) / name)
            with throttled(volume.device, rate) as throttle:
                drop_caches()
                subprocess.run(throttle.wrap([sys.executable, "-m", "preflight", "run", "-c", str(config), "--only",
                                              "storage", "--json", report]), capture_output=True, cwd=REPO, env=env,
                               timeout=600)
            return report

        def pair(index: int, duration: str) -> tuple[bool, bool, str]:
            full, again = run(RATE, f"a{index}.json", duration), run(RATE, f"b{index}.json", duration)
            dropped = run(DROPPED, f"d{index}.json", duration)
            cut, same = diff(again, dropped), diff(full, again)
            line = next(line for line in cut.stdout.splitlines() if line.startswith("storage.seq_read "))
            unchanged = next(line for line in same.stdout.splitlines() if line.startswith("storage.seq_read "))
            hit = cut.returncode == 1 and "REGRESSED" in line
            values = [next(r["value"] for r in json.loads(Path(p).read_text())["results"] if r["metric"] == "seq_read")
                      for p in (full, again, dropped)]
            label = f"pair {index + 1:2d}" if index >= 0 else "pair  0"
            print(f"{label} at {duration}: seq_read {values[0]:6.1f} {values[1]:6.1f} -> {values[2]:6.1f} "
                  f"MB/s  drop {'caught' if hit else 'missed'}: {' '.join(line.split()[4:])}; unchanged pair exit "
                  f"{same.returncode}: {' '.join(unchanged.split()[4:])}", flush=True)
            return hit, same.returncode != 0, unchanged

        def diff(old: str, new: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "preflight", "diff", old, new, "--fail-on", args.fail_on],
                                  capture_output=True, text=True, cwd=REPO, env=env)

        _, _, line = pair(-1, "3s")
        named = re.search(r"a duration ([\d.]+)x as long in both runs would tell", line)
        duration = f"{math.ceil(3 * float(named.group(1)))}s" if named else "3s"
        print(f"the unchanged pair at the bundled 3s: {'the diff names ' + duration if named else 'within its band'}; "
              f"{args.pairs} pairs at {duration}", flush=True)
        caught = unchanged_failed = 0
        for index in range(args.pairs):
            hit, failed, _ = pair(index, duration)
            caught, unchanged_failed = caught + hit, unchanged_failed + failed
        print(f"drops caught: {caught} of {args.pairs}; unchanged pairs failed: {unchanged_failed} of {args.pairs}")
    return 0 if caught == args.pairs and not unchanged_failed else 1


if __name__ == "__main__":
    sys.exit(main())
