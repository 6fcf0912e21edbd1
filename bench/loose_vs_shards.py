"""The same ImageNet-shaped bytes read as loose files and as WebDataset tar shards, by the dataloader check.

Usage: python3 bench/loose_vs_shards.py [--files 2000] [--shards 20] [--workers 2] [--rounds 5]

Writes ``files`` files of about 110 kB (ImageNet's median JPEG) in 20 class folders, and the
same bytes packed, in a shuffled order as webdataset's examples pack them, into ``shards``
tar shards (``KEY.jpg`` + ``KEY.cls`` per sample), in a temporary directory on the working
directory's filesystem. Then alternates, round by round, the dataloader check with
``format: files`` and with ``format: tar`` (``num_workers`` N, batch 64, raw bytes, each file
or shard read cold), so that other load on the machine falls on both alike, and prints
samples/s and MB/s (1 MB = 10^6 B of sample payload) of each and the tar/files ratio.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from preflight.checks import dataloader  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402
from preflight.config import coerce_option  # noqa: E402

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
    root = tempfile.mkdtemp(prefix=".preflight-bench-", dir=os.getcwd())
    try:
        loose, packed = write_both(root, args.files, args.shards)
        base = {o.name: coerce_option(o, None, o.name) for o in dataloader.OPTIONS}
        base.update(num_workers=args.workers, batch_size=64, max_files=max(args.files, args.shards))
        runs = {"files": dict(base, path=loose, format="files"), "tar": dict(base, path=packed, format="tar")}
        print(f"{args.files} files of ~{SIZE // 1000} kB in {CLASSES} class folders vs the same bytes in "
              f"{args.shards} tar shards; {args.workers} workers, batch 64, cold reads")
        print(f"{'round':>5} {'files samples/s':>16} {'files MB/s':>11} {'tar samples/s':>14} {'tar MB/s':>9} "
              f"{'ratio':>6}")
        ratios, method = [], {}
        for round_ in range(1, args.rounds + 1):
            rates = {}
            for form, options in runs.items():
                measured = {m.metric: m for m in dataloader.measure(options, Budget(args.duration, 120))}
                if not measured["throughput"].measured:
                    print(f"{form}: not measured: {measured['throughput'].reason}")
                    return 1
                rates[form] = (float(measured["throughput"].value), float(measured["bandwidth"].value))
                method[form] = measured["throughput"].method
            ratios.append(rates["tar"][0] / rates["files"][0])
            print(f"{round_:>5} {rates['files'][0]:>16.0f} {rates['files'][1]:>11.1f} {rates['tar'][0]:>14.0f} "
                  f"{rates['tar'][1]:>9.1f} {ratios[-1]:>6.2f}")
        print(f"median ratio tar/files {statistics.median(ratios):.2f}")
        for form, text in method.items():
            print(f"{form}: {text.replace(root, 'TMP')}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
