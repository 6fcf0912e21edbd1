"""Collective bus bandwidth: preflight's ``collective`` check next to a plain all-reduce loop, in one run.

Run under torchrun (gloo on CPU, NCCL on GPUs)::

    torchrun --standalone --nproc-per-node 2 bench/collective_reference.py [--size-mib 16] [--rounds 5]

The reference is deliberately independent of preflight's code: the loop nccl-tests'
all_reduce_perf runs (doc/PERFORMANCE.md), written out by hand: barrier, ``iters``
all-reduces of float32, synchronize, time averaged over ranks, ``busbw = S / t * 2(n-1)/n``.
The two alternate ``--rounds`` times so that machine noise hits both alike; rank 0 prints
each round's GB/s and the ratio of the medians. The target is a ratio within 0.85-1.15 on
a quiet machine; exit status 1 when it is outside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from preflight.checks import collective  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402


def reference(size: int, iters: int) -> float:
    """Median bus bandwidth in GB/s (10^9 B/s) of 3 samples of ``iters`` back-to-back all-reduces."""
    import torch
    import torch.distributed as dist

    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
    for _ in range(2):
        dist.all_reduce(buffer)
    ranks, samples = dist.get_world_size(), []
    for _ in range(3):  # three samples and their median, as the check takes
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buffer)
        if nccl:
            torch.cuda.synchronize()
        mine = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
        dist.all_reduce(mine)
        samples.append(size / (mine.item() / ranks) * 2 * (ranks - 1) / ranks / 1e9)
    return statistics.median(samples)


def main() -> int:
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    size = args.size_mib << 20
    options = {"min_size": size, "max_size": size, "iterations": args.iters, "repeats": 3}
    ours, theirs = [], []
    for _ in range(args.rounds):
        measured = collective.measure(options, Budget(duration_s=5.0, timeout_s=120.0))
        ours.append(next(m.value for m in measured if m.metric == "allreduce_busbw"))
        theirs.append(reference(size, args.iters))
    dist.destroy_process_group()
    if int(os.environ["RANK"]) != 0:
        return 0
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"{backend} all-reduce, {args.size_mib} MiB float32, {os.environ['WORLD_SIZE']} ranks, {args.rounds} rounds")
    for index, (a, b) in enumerate(zip(ours, theirs)):
        print(f"  round {index}: preflight {a:.3f} GB/s   reference loop {b:.3f} GB/s")
    print(f"median: preflight {statistics.median(ours):.3f} GB/s, reference {statistics.median(theirs):.3f} GB/s, "
          f"ratio {ratio:.3f} (target 0.85-1.15)")
    return 0 if 0.85 <= ratio <= 1.15 else 1


if __name__ == "__main__":
    sys.exit(main())
