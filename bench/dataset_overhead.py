"""The job's own Dataset through the dataloader check against a plain loop over the same DataLoader.

Usage: .venv/bin/python bench/dataset_overhead.py [--workers 2] [--rounds 5] [--seconds 4] [--files 2000]

Writes ``--files`` uint8 3x96x96 tensors with ``torch.save`` in 10 class folders (in a
temporary directory on the working directory's filesystem) and loads them with the example
job's factory, ``examples/imagefolder``'s ``tensor_folder`` (``torch.load``, resize to 64,
normalize). Each round runs, back to back and alternating who goes first:

- preflight: the dataloader check with ``dataset: imagefolder_job.dataset:tensor_folder``
  (``worker_pools`` fresh pools, warm-up batches discarded in each, samples/s over windows);
- by hand: the same factory in a ``torch.utils.data.DataLoader`` with the same settings,
  the first 2 batches per worker discarded, then every batch counted for ``--seconds``,
  as a training loop with nothing else to do would see it.

Target (issue 13): the median of the rounds' ratios preflight / by hand within 5%:
preflight adds nothing to the user's pipeline that it then reports as the pipeline's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples", "imagefolder", "src"))

import torch  # noqa: E402

from bench.common import alternating, scratch_root  # noqa: E402
from imagefolder_job.dataset import tensor_folder  # noqa: E402
from preflight.checks import dataloader  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402
from preflight.config import coerce_option  # noqa: E402
from preflight.yaml_source import Located  # noqa: E402

BATCH, SIZE = 32, 64


def write_tensors(root: str, files: int) -> None:
    generator = torch.Generator().manual_seed(0)
    for index in range(files):
        folder = os.path.join(root, f"class{index % 10}")
        os.makedirs(folder, exist_ok=True)
        pixels = torch.randint(0, 256, (3, 96, 96), dtype=torch.uint8, generator=generator)
        torch.save(pixels, os.path.join(folder, f"{index:05d}.pt"))


def by_hand(root: str, workers: int, seconds: float) -> float:
    """samples/s of a plain loop over the factory's DataLoader, after 2 batches per worker."""
    loader = torch.utils.data.DataLoader(tensor_folder(root, SIZE), batch_size=BATCH, shuffle=True,
                                         num_workers=workers, prefetch_factor=2, persistent_workers=True)
    batches = iter(loader)
    for _ in range(2 * workers):
        next(batches)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            images, _ = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        count += images.shape[0]
    return count / (time.perf_counter() - start)


def through_preflight(root: str, workers: int, seconds: float) -> float:
    given = {"dataset": "imagefolder_job.dataset:tensor_folder", "dataset_args": {"root": Located(root, "bench"),
             "size": Located(SIZE, "bench")}, "python_path": [Located(os.path.join(ROOT, "examples", "imagefolder",
             "src"), "bench")], "num_workers": workers, "batch_size": BATCH, "pin_memory": False}
    options = {o.name: coerce_option(o, Located(given[o.name], "bench") if o.name in given else None, o.name)
               for o in dataloader.OPTIONS}
    measured = {m.metric: m for m in dataloader.measure(options, Budget(seconds, 600))}
    return float(measured["throughput"].value)  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    with scratch_root() as root:
        write_tensors(root, args.files)
        print(f"{args.files} uint8 3x96x96 tensors (torch.save), tensor_folder -> 3x{SIZE}x{SIZE} float32, "
              f"batch {BATCH}, {args.workers} workers, {args.seconds:g}s per side and round; "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{'round':>5} {'by hand':>10} {'preflight':>10} {'ratio':>6}  samples/s")
        rounds = alternating(args.rounds, lambda: by_hand(root, args.workers, args.seconds),
                             lambda: through_preflight(root, args.workers, args.seconds),
                             after=lambda run, plain, ours: print(f"{run:>5} {plain:>10.0f} {ours:>10.0f} "
                                                                 f"{ours / plain:>6.2f}", flush=True))
        ratio = statistics.median(ours / plain for plain, ours in rounds)
        verdict = "met" if 0.95 <= ratio <= 1.05 else "MISSED"
        print(f"median ratio {ratio:.3f} (target 0.95-1.05: {verdict})")
        return 0 if verdict == "met" else 1


if __name__ == "__main__":
    sys.exit(main())
