"""``scan: all`` against a plain ``os.read`` loop over the same files, both cold, both with the same readers.

Usage: python3 bench/scan_rate.py [--files 10000] [--size 110000] [--workers 2] [--rounds 3]

Writes ``--files`` files of ``--size`` random bytes in class folders (an ImageNet-shaped set) on the working
directory's filesystem. Per round, in turn, with the page cache dropped before each (root: /proc/sys/vm/drop_caches;
otherwise the bench says it cannot): ``preflight run`` with the dataloader check and ``scan: all`` (its files/s
over the scan, from the row's note), and a plain loop of ``--workers`` processes reading every file whole with
``os.read`` in 1 MiB requests. Prints files/s of each and their ratio; the issue's target is within 10 %.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import in_turn, scratch_root  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as handle:
        handle.write("3\n")


def _read_all(names: list[str]) -> int:
    total = 0
    for name in names:
        fd = os.open(name, os.O_RDONLY)
        try:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                total += len(chunk)
        finally:
            os.close(fd)
    return total


def plain_rate(names: list[str], workers: int) -> float:
    """files/s of ``workers`` processes reading every file whole, cold."""
    drop_caches()
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_read_all, [names[i::workers] for i in range(workers)])
    return len(names) / (time.perf_counter() - start)


def scan_rate(config: str) -> float:
    """files/s of the dataloader's ``scan: all``, cold, read from its note."""
    drop_caches()
    done = subprocess.run([sys.executable, "-m", "preflight", "run", "-c", config, "--format", "json"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PREFLIGHT_LOCK": "off", "PYTHONPATH": ROOT})
    note = {r["metric"]: r for r in json.loads(done.stdout)["results"]}["unreadable_samples"]["note"]
    found = re.search(r"scan: all read the rest of the [\d,]+ files: ([\d,]+) in ([\d.]+) s", note)
    if not found:
        raise SystemExit(f"bench: the scan did not finish: {note}")
    return int(found[1].replace(",", "")) / float(found[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--size", type=int, default=110_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: dropping the page cache between runs needs root")
    with scratch_root() as root:
        names = []
        for index in range(args.files):
            folder = os.path.join(root, "data", f"n{index % 10:08d}")
            os.makedirs(folder, exist_ok=True)
            names.append(os.path.join(folder, f"{index:06d}.JPEG"))
            with open(names[-1], "wb") as out:
                out.write(os.urandom(args.size))
        config = os.path.join(root, "thresholds.yaml")
        with open(config, "w") as out:
            out.write(textwrap.dedent(f"""\
                version: 1
                checks:
                  dataloader:
                    path: {os.path.join(root, "data")}
                    scan: all
                    duration: 0.1s
                    worker_pools: 1
                    num_workers: {args.workers}
                    unreadable_samples: {{max: 0}}
                """))
        print(f"{args.files} files of {args.size} B on {os.path.abspath(root)}; {args.workers} readers; cold each run")
        print(f"{'round':>5} {'scan':>10} {'plain':>10} {'ratio':>6}")
        ratios = []
        for run in range(1, args.rounds + 1):
            scanned, plain = in_turn(run, lambda: scan_rate(config), lambda: plain_rate(names, args.workers))
            ratios.append(scanned / plain)
            print(f"{run:5} {scanned:10,.0f} {plain:10,.0f} {scanned / plain:6.2f}")
        print(f"median ratio (scan / plain): {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
