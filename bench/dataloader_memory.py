"""The dataloader check's memory figures against /proc read by hand, and its epoch projection against a real epoch.

Usage: python3 bench/dataloader_memory.py [--records 300000] [--workers 2] [--windows 4] [--window-s 0.3] [--numpy]

Builds the classic case, a map-style Dataset holding a Python list of small dicts (or, with
``--numpy``, the same records in numpy arrays), and pulls it through a DataLoader (shuffled, batch
64) with ``memory.Watched``, the puller the check uses:

1. after each window the check's reading (``memory.read``: smaps_rollup) is compared with the
   same processes read by hand a moment later: the sum of every mapping's ``Pss:`` line in
   /proc/PID/smaps (the kernel's per-mapping figures, not the rollup) and, for scale, the sum of
   ``ps -o rss`` (which counts shared pages once per process). Target: within 5%.
2. the projection from those windows (``memory.project``: the copy-on-write saturation fitted on
   them) against the real epoch's peak: the loader's PSS (main process and workers, smaps_rollup)
   read every 64 batches for the rest of the epoch of ``--records`` samples, the largest kept.
   Target: within 20% either way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from preflight.loading.footprint import memory  # noqa: E402

MiB = 2**20


class Records(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.items = [{"id": i, "path": f"img_{i:07d}.jpg"} for i in range(n)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[int, str]:
        record = self.items[index]  # as a job's Dataset reads its annotation: the label and the file to open
        return record["id"], record["path"]


class Arrays(torch.utils.data.Dataset):
    """The same records in numpy arrays: two objects in all, no reference count per record."""

    def __init__(self, n: int) -> None:
        self.ids = np.arange(n)
        self.paths = np.array([f"img_{i:07d}.jpg" for i in range(n)])

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[int, str]:
        return int(self.ids[index]), str(self.paths[index])


def smaps_pss(pid: int) -> int:
    """Bytes: the sum of the Pss: lines of every mapping in /proc/PID/smaps."""
    with open(f"/proc/{pid}/smaps") as handle:
        return sum(int(line.split()[1]) * 1024 for line in handle if line.startswith("Pss:"))


def ps_rss(pids: list[int]) -> int:
    out = subprocess.run(["ps", "-o", "rss=", "-p", ",".join(map(str, pids))], capture_output=True, text=True)
    return sum(int(v) * 1024 for v in out.stdout.split())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--window-s", type=float, default=0.3, help="seconds per window")
    parser.add_argument("--numpy", action="store_true", help="the records in numpy arrays, not a list of dicts")
    args = parser.parse_args()
    before = memory.rollup(os.getpid())
    dataset = (Arrays if args.numpy else Records)(args.records)
    footprint = memory.rollup(os.getpid()).anonymous - before.anonymous  # as the check reads it (user.build)
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=args.workers)
    watch = memory.Watch()
    puller = watch.puller(loader, lambda batch: (len(batch[0]), 0))
    puller.skip(2 * args.workers)
    worst = 0.0
    print(f"{'samples':>9} {'check PSS':>10} {'smaps PSS':>10} {'diff':>6} {'ps RSS':>9}")
    for _ in range(args.windows):
        puller.window(args.window_s)
        reading = puller.readings[-1]
        pids = [os.getpid()] + [p.pid for p in puller.iterator._workers]
        by_hand = sum(smaps_pss(pid) for pid in pids)
        diff = (reading.pss - by_hand) / by_hand
        worst = max(worst, abs(diff))
        print(f"{reading.delivered:>9,} {reading.pss / MiB:>8.1f}Mi {by_hand / MiB:>8.1f}Mi {diff:>+6.1%} "
              f"{ps_rss(pids) / MiB:>7.1f}Mi")
    projection = memory.project(watch.pools, len(dataset), footprint)
    puller.watching = False
    real, at = 0, 0
    while puller.delivered < len(dataset):  # the rest of the epoch, its PSS read every 64 batches
        puller._next()
        if puller.batches % 64 == 0 or puller.delivered >= len(dataset):
            pids = [os.getpid()] + [p.pid for p in puller.iterator._workers]
            held = sum(r.pss for r in (memory.rollup(pid) for pid in pids) if r is not None)
            if held > real:
                real, at = held, puller.delivered
    off = (projection.projected - real) / real
    cow = projection.cow
    how = ("no growth to fit" if cow is None else
           f"fitted: {cow.per_worker / MiB:.0f} MiB per worker at saturation, {cow.k:.0f} records per page"
           if cow.fitted else f"not seen slowing: up to {cow.per_worker / MiB:.0f} MiB per worker, of a bound of "
           f"{cow.bound / MiB:.0f} MiB ({cow.bound_of})")
    print(f"projected {projection.projected / MiB:.0f} MiB over the epoch of {len(dataset):,} samples "
          f"({projection.peak / MiB:.0f} MiB after {projection.delivered:,}, +{projection.growth:.0f} B per sample; "
          f"{how}); real epoch's peak {real / MiB:.0f} MiB after {at:,} samples")
    ok = worst <= 0.05 and abs(off) <= 0.20
    print(f"check vs smaps by hand: worst {worst:.1%} (target 5%); projection "
          f"{'above' if off >= 0 else 'below'} the real epoch's peak by {abs(off):.1%} (target 20%): "
          f"{'OK' if ok else 'MISSED'}")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
