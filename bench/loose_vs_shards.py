"""The same ImageNet-shaped bytes read as loose files and as WebDataset tar shards, by the dataloader check.

Usage: python3 bench/loose_vs_shards.py [--files 2000] [--shards 20] [--workers 2] [--rounds 5]

Writes ``files`` files of about 110 kB (ImageNet's median JPEG) in 20 class folders, and the
same bytes packed, in a shuffled order as webdataset's examples pack them, into ``shards``
tar shards (``KEY.jpg`` + ``KEY.cls`` per sample), in a temporary directory on the working
directory's filesystem. Then alternates, round by round, who goes first: the dataloader check with
``format: files`` and with ``format: tar`` (``num_workers`` N, batch 64, raw bytes, each file
or shard read cold), so that other load on the machine falls on both alike, and prints
samples/s and MB/s (1 MB = 10^6 B of sample payload) of each and the tar/files ratio.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import alternating, defaults, scratch_root  # noqa: E402
from preflight.checks import dataloader  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402

CLASSES = 20
SIZE = 110_000


def write_both(root: str, files: int, shards: int) -> tuple[str, str]:
    """``root/loose/nCLASS/KEY.jpg`` and ``root/shards/shard-NNNNNN.tar`` holding the same bytes."""
    loose, packed = os.path.join(root, "loose"), os.path.join(root, "shards")
    samples = []
    for index in range(files):
        label = index % CLASSES
        key = f"n{label:08d}_{index:05d}"
        folder = os.path.join(loose, f"n{label:08d}")
        os.makedirs(folder, exist_ok=True)
        data = os.urandom(SIZE + (index % 7) * 512)
        with open(os.path.join(folder, key + ".jpg"), "wb") as handle:
            handle.write(data)
        samples.append((key, data, str(label).encode()))
    random.Random(0).shuffle(samples)
    os.makedirs(packed)
    per_shard = -(-files // shards)
    for shard in range(shards):
        with tarfile.open(os.path.join(packed, f"shard-{shard:06d}.tar"), "w") as tar:
            for key, data, label in samples[shard * per_shard:(shard + 1) * per_shard]:
                for extension, payload in (("jpg", data), ("cls", label)):
                    info = tarfile.TarInfo(f"{key}.{extension}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
    os.sync()
    return loose, packed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=2.0, help="seconds of sampling per measurement")
    args = parser.parse_args()
    with scratch_root() as root:
        loose, packed = write_both(root, args.files, args.shards)
        base = defaults("dataloader", num_workers=args.workers, batch_size=64, max_files=max(args.files, args.shards))
        runs = {"files": dict(base, path=loose, format="files"), "tar": dict(base, path=packed, format="tar")}
        print(f"{args.files} files of ~{SIZE // 1000} kB in {CLASSES} class folders vs the same bytes in "
              f"{args.shards} tar shards; {args.workers} workers, batch 64, cold reads")
        print(f"{'round':>5} {'files samples/s':>16} {'files MB/s':>11} {'tar samples/s':>14} {'tar MB/s':>9} "
              f"{'ratio':>6}")
        method = {}

        def measure(form: str) -> tuple[float, float]:
            measured = {m.metric: m for m in dataloader.measure(runs[form], Budget(args.duration, 120))}
            if not measured["throughput"].measured:
                raise SystemExit(f"{form}: not measured: {measured['throughput'].reason}")
            method[form] = measured["throughput"].method
            return float(measured["throughput"].value), float(measured["bandwidth"].value)  # type: ignore[arg-type]

        rounds = alternating(args.rounds, lambda: measure("files"), lambda: measure("tar"), after=lambda run, f, t: print(
            f"{run:>5} {f[0]:>16.0f} {f[1]:>11.1f} {t[0]:>14.0f} {t[1]:>9.1f} {t[0] / f[0]:>6.2f}", flush=True))
        print(f"median ratio tar/files {statistics.median(t[0] / f[0] for f, t in rounds):.2f}")
        for form, text in method.items():
            print(f"{form}: {text.replace(root, 'TMP')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
