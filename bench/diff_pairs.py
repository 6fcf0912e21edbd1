"""`preflight diff --fail-on 10%` on back-to-back runs of a loaded node: unchanged pairs pass, a halved volume fails.

Usage: python3 bench/diff_pairs.py [--pairs 10] [--rate 30] [--busy 2] [--per-class 100] [--keep DIR] [--dir DIR]
       (as root: it makes a loop device, mounts it, makes two blkio cgroups and drops the page cache)

Issue 35 case 2: two back-to-back runs of an unchanged node at load 5-6 gave ``storage.small_files worse
-19% (noise ±5%)`` and ``--fail-on 10%`` failed the node. This bench makes that node for real and diffs
its runs the way a pipeline would:

- the volume: an ImageNet-shaped folder (``tests.datasets.imagenet``, 30 x --per-class files of 110-113 kB)
  on a fresh ext4 image on a loop device with direct I/O (``founding_table.loop_volume``), read through a
  cgroup-v1 blkio read throttle of --rate MB/s, and a second group at half of it
  (``founding_table.throttled``);
- the run: ``preflight run`` of a small config (storage ``seq_read`` and ``small_files``, 1 s per read
  part; a dataloader of 2 workers for 2 s with ``throughput`` and ``throughput_vs_required`` gated), in
  the throttled group, the page cache dropped first (``founding_table.drop_caches``);
- the load: --busy ``yes > /dev/null`` processes for the whole bench (``founding_table.busy``, killed by pid);
- each round runs A and B at the full rate and H at half of it, back to back; ``preflight diff A B
  --fail-on 10%`` is an unchanged pair and must exit 0, ``preflight diff B H --fail-on 10%`` a halved
  volume and must exit 1 naming the rates the throttle bounds (``HALVED``).

It prints each round (each run's figures, each diff's exit and what it called regressed), then each
metric's run-to-run CV over the full-rate runs next to the floor ``preflight diff`` assumes for it
(``report.noise.RUN_TO_RUN``). Exit 0 when every unchanged pair passed and every halved pair was caught.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import scratch_root  # noqa: E402
from bench.founding_table import (CLASSES, IMAGE_MARGIN, ROOT, Throttle, busy, drop_caches,  # noqa: E402
                                  loop_volume, throttled)
from preflight.report.noise import cv, floor  # noqa: E402
from tests.datasets import imagenet  # noqa: E402

# The rates a read throttle bounds: each must be named REGRESSED in every halved pair.
HALVED = ("storage.seq_read", "storage.small_files", "dataloader.throughput", "dataloader.throughput_vs_required")
SHOWN = HALVED + ("storage.rand_read", "storage.rand_read_p99")  # printed per run


def config(where: str, data: Path, required: float) -> str:
    """The bench's thresholds file: storage's read parts 1 s each over ``data``, a dataloader for 2 s that must feed
    one GPU of ``required`` samples/s (``throughput_vs_required``, a % the user gates)."""
    path = os.path.join(where, "pairs.yaml")
    Path(path).write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{retries: 0}}
        checks:
          storage:
            path: {data}
            duration: 3s
            seq_read: {{min: 1 MB/s}}
            small_files: {{min: 1 files/s}}
          dataloader:
            path: {data}
            duration: 2s
            batch_size: 32
            num_workers: 2
            samples_per_gpu: {required:.0f} samples/s
            gpus: 1
            throughput: {{min: 1 samples/s}}
            throughput_vs_required: {{min: 50 %}}
        """))
    return path


def run(throttle: Throttle, thresholds: str, report: str) -> dict[str, float]:
    """One ``preflight run`` in ``throttle``'s group, the page cache dropped first; its JSON written to ``report``.
    Returns the numeric values by result id."""
    drop_caches()
    done = subprocess.run(throttle.wrap([sys.executable, "-m", "preflight", "run", "-c", thresholds, "--json",
                                         report]), capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT, NO_COLOR="1"))
    if not os.path.exists(report):
        raise SystemExit(f"bench: preflight run wrote no report (exit {done.returncode}): {done.stderr[-500:]}")
    with open(report) as handle:
        results = json.load(handle)["results"]
    errors = [f"{r['id']}: {r['message']}" for r in results if r["verdict"] == "error"]
    if errors:
        raise SystemExit(f"bench: a check did not measure: {'; '.join(errors)}")
    return {r["id"]: r["value"] for r in results if isinstance(r["value"], (int, float))}


def diff(old: str, new: str) -> tuple[int, list[str], str]:
    """``preflight diff OLD NEW --fail-on 10%``: its exit status, the ids it called REGRESSED, its output."""
    done = subprocess.run([sys.executable, "-m", "preflight", "diff", old, new, "--fail-on", "10%"],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, NO_COLOR="1"))
    if done.returncode not in (0, 1):
        raise SystemExit(f"bench: preflight diff failed (exit {done.returncode}): {done.stderr.strip()}")
    regressed = [line.split()[0] for line in done.stdout.splitlines() if " REGRESSED " in line]
    return done.returncode, regressed, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="rounds (one unchanged and one halved pair each)")
    parser.add_argument("--rate", type=float, default=30, help="the read throttle in MB/s (halved: half of it)")
    parser.add_argument("--busy", type=int, default=2, help="`yes > /dev/null` processes for the whole bench")
    parser.add_argument("--per-class", type=int, default=100, help=f"files in each of the {CLASSES} class folders")
    parser.add_argument("--keep", help="a directory to copy every run's JSON report into (round-N-{A,B,H}.json)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the image file lives (default: /tmp)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/diff_pairs: needs root (loop device, mount, cgroup, drop_caches)", file=sys.stderr)
        return 2
    missing = [tool for tool in ("mkfs.ext4", "losetup", "mount", "yes") if not shutil.which(tool)]
    if missing:
        print(f"bench/diff_pairs: missing {', '.join(missing)}: apt-get install e2fsprogs util-linux", file=sys.stderr)
        return 2
    full = int(args.rate * 1e6)
    values: dict[str, list[float]] = {}
    unchanged_ok = halved_ok = 0
    started, load_before = time.monotonic(), os.getloadavg()
    nbytes = int(CLASSES * args.per_class * 113_000 * IMAGE_MARGIN) + (384 << 20)  # and seq_read's 256 MiB scratch
    with scratch_root(args.dir) as work, loop_volume(work, nbytes) as volume:
        data = imagenet(volume.mountpoint / "train", CLASSES, args.per_class)
        size = statistics.fmean(f.stat().st_size for f in data.rglob("*.JPEG"))
        # One GPU needing 80% of what the full rate allows: the halved volume feeds 40% of it.
        thresholds = config(work, data, 0.8 * full / size)
        print(f"diff pairs: {CLASSES * args.per_class} files of {size / 1e3:.1f} kB mean on ext4 on {volume.loop} "
              f"(direct I/O: {'yes' if volume.direct_io else 'NO'}), read throttle {full / 1e6:g} MB/s, halved "
              f"{full / 2e6:g} MB/s; {args.busy} x `yes > /dev/null`; {os.cpu_count()} CPUs, load average "
              f"{load_before[0]:.1f} before", flush=True)
        with throttled(volume.device, full) as at_full, throttled(volume.device, full // 2) as at_half, busy(args.busy):
            for number in range(1, args.pairs + 1):
                reports = {name: os.path.join(work, f"round-{number}-{name}.json") for name in "ABH"}
                figures = {name: run(at_full if name != "H" else at_half, thresholds, reports[name])
                           for name in "ABH"}
                for name in "AB":
                    for key, value in figures[name].items():
                        values.setdefault(key, []).append(value)
                same, same_named, _ = diff(reports["A"], reports["B"])
                cut, cut_named, cut_text = diff(reports["B"], reports["H"])
                unchanged_ok += same == 0
                caught = cut == 1 and all(key in cut_named for key in HALVED)
                halved_ok += caught
                print(f"round {number:2} (load {os.getloadavg()[0]:.1f}):", flush=True)
                for name in "ABH":
                    print(f"  {name}: " + ", ".join(f"{key.split('.', 1)[1]} {figures[name].get(key, float('nan')):.4g}"
                                                    for key in SHOWN))
                print(f"  diff A B --fail-on 10%: exit {same}" + (f", REGRESSED {', '.join(same_named)}" if same_named
                                                                    else ""))
                print(f"  diff B H --fail-on 10%: exit {cut}, REGRESSED {', '.join(cut_named) or 'nothing'}"
                      + ("" if caught else "  <- MISSED"))
                if not caught:
                    print(textwrap.indent(cut_text, "    "))
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    for path in reports.values():
                        shutil.copy(path, args.keep)
    print(f"load average after: {os.getloadavg()[0]:.1f}; {time.monotonic() - started:.0f} s in all")
    print(f"{'metric':34} {'runs':>4} {'mean':>10} {'run-to-run CV':>13} {'floor':>6}")
    for key, series in values.items():
        if len(series) > 1 and any(series):
            print(f"{key:34} {len(series):4} {statistics.fmean(series):10.4g} {cv(series):13.1%} "
                  f"{floor(key).cv:6.1%}")
    print(f"unchanged pairs without a regression at --fail-on 10%: {unchanged_ok} of {args.pairs}; halved pairs "
          f"caught (exit 1, naming {', '.join(HALVED)}): {halved_ok} of {args.pairs}")
    return 0 if unchanged_ok == halved_ok == args.pairs else 1


if __name__ == "__main__":
    sys.exit(main())
