"""The pipeline check against a hand-written training loop over the same Dataset, model, batch and workers.

Usage: .venv/bin/python bench/pipeline_vs_loop.py [--latencies 0,2,4] [--rounds 4] [--seconds 3]
                                                  [--workers 2] [--files 8000] [--threads 1] [--busy N]

Writes ``--files`` uint8 3x96x96 tensors with ``torch.save`` in 10 class folders (a temporary
directory on the working directory's filesystem) and reads them with the example job's factory
(``examples/imagefolder``'s ``tensor_folder``: ``torch.load``, resize to 64, normalize), wrapped in
a Dataset that first sleeps ``latency`` ms per sample: the volume's speed, as a network volume's
per-read latency holds a worker without using a CPU (0: the fast local volume, the files in the page
cache). 8,000 files hold more samples than either side reads in a round at these rates, so neither
times an epoch's end (a job's epoch is far longer than a bench's seconds; the check's one pass over
the dataset goes on into a second epoch where it must, as the loop does). For each latency, rounds
alternate who goes first (``bench.common.alternating``):

- the check: the ``pipeline`` check in this process (``dataset:`` the factory, ``model: tiny`` at
  3x64x64, 10 classes, batch 32, ``--workers`` workers, ``persistent_workers: true``, duration
  ``--seconds``): its ``samples_per_s`` and ``input_bound``;
- the loop: what a job writes (pytorch/examples' imagenet ``train()``): a ``DataLoader`` with the same
  settings and ``persistent_workers=True``, the same model (``build.tiny``) and SGD step (momentum 0.9,
  cross-entropy on the batch's labels); the loop's own warm-up (the first 2 batches per worker and
  3 steps) discarded, then every batch for ``--seconds`` x 2, starting the next epoch where one ends.
  samples/s = samples / wall time; the wait share = the time spent in ``next(batches)`` (and the copy
  to the device) / wall time: pytorch/examples' ``data_time`` over ``batch_time``. Shown beside it,
  not judged: the loop's median over windows as long as the check's (``--seconds``/10), which a burst
  of other load moves as little as it moves the check's median.

Targets (issue 36, case 3): at each latency, the median of the rounds' samples/s ratio (check / loop)
within 10%, and of the wait-share difference (input_bound - the loop's wait share) within 10 points.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import textwrap
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples", "imagefolder", "src"))

import torch  # noqa: E402

from bench.common import alternating, scratch_root  # noqa: E402
from bench.dataset_overhead import write_tensors  # noqa: E402
from bench.founding_table import busy  # noqa: E402
from preflight.checks import pipeline  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402
from preflight.training.build import tiny  # noqa: E402
from preflight.config import coerce_option  # noqa: E402
from preflight.io.dataset import Dataset  # noqa: E402
from preflight.yaml_source import Located  # noqa: E402

BATCH, SIZE, CLASSES = 32, 64, 10
RATIO_TOLERANCE, SHARE_TOLERANCE = 0.10, 10.0  # the targets: samples/s within 10%, wait share within 10 points
JOB = '''
"""The bench's job: the example's tensor folder behind a volume that takes ``latency_ms`` per sample."""

import time

import torch

from imagefolder_job.dataset import tensor_folder


class Slow(torch.utils.data.Dataset):
    def __init__(self, inner, latency_s):
        self.inner, self.latency_s = inner, latency_s

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        if self.latency_s:
            time.sleep(self.latency_s)
        return self.inner[index]


def folder(root, size, latency_ms=0.0):
    return Slow(tensor_folder(root, size), latency_ms / 1e3)
'''


class Side(NamedTuple):
    samples_per_s: float
    wait_percent: float  # the loop's data_time share; the check's input_bound
    alone: float = 0.0  # the check's model_samples_per_s (the step alone, no loader)
    windows: float = 0.0  # the loop's median over windows of duration/10, as the check's windows last


def write_job(where: str) -> str:
    """The job's package ``benchjob`` (module ``volume``) under ``where/src``; returns that folder."""
    package = os.path.join(where, "src", "benchjob")
    os.makedirs(package)
    open(os.path.join(package, "__init__.py"), "w").close()
    with open(os.path.join(package, "volume.py"), "w") as handle:
        handle.write(textwrap.dedent(JOB))
    return os.path.dirname(package)


def by_loop(root: str, src: str, latency_ms: float, workers: int, seconds: float) -> Side:
    """samples/s and the wait share of a plain training loop, as a job writes it, after its own warm-up."""
    sys.path[:0] = [src] if src not in sys.path else []
    from benchjob.volume import folder  # noqa: PLC0415  the job's module, on the path just put first

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = tiny(3, CLASSES).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(folder(root, SIZE, latency_ms), batch_size=BATCH, shuffle=True,
                                         num_workers=workers, prefetch_factor=2 if workers else None,
                                         persistent_workers=workers > 0, pin_memory=device.type == "cuda")
    batches = iter(loader)

    def step() -> tuple[int, float]:
        nonlocal batches
        start = time.perf_counter()
        try:
            images, labels = next(batches)
        except StopIteration:  # the epoch ended: the next one, on the same persistent workers
            batches = iter(loader)
            images, labels = next(batches)
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        waited = time.perf_counter() - start
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return int(images.shape[0]), waited

    for _ in range(max(3, 2 * workers)):  # the loop's own warm-up: the workers' first batches, the first steps
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    samples, waited, start = 0, 0.0, time.perf_counter()
    rates, window_start, window_samples = [], start, 0
    while time.perf_counter() - start < 2 * seconds:  # as long as the check's two kinds of window together
        n, w = step()
        samples, waited, window_samples = samples + n, waited + w, window_samples + n
        if time.perf_counter() - window_start >= seconds / 10:
            rates.append(window_samples / (time.perf_counter() - window_start))
            window_start, window_samples = time.perf_counter(), 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return Side(samples / wall, 100 * waited / wall, windows=statistics.median(rates))


def by_check(root: str, src: str, latency_ms: float, workers: int, seconds: float) -> Side:
    """The pipeline check's samples_per_s and input_bound over the same job, as a run of its own."""
    given = {"dataset": "benchjob.volume:folder",
             "dataset_args": {"root": Located(root, "bench"), "size": Located(SIZE, "bench"),
                              "latency_ms": Located(float(latency_ms), "bench")},
             "python_path": [Located(src, "bench"), Located(os.path.join(ROOT, "examples", "imagefolder", "src"),
                                                              "bench")],
             "num_workers": workers, "batch_size": BATCH, "persistent_workers": workers > 0, "model": "tiny",
             "input_shape": [Located(3, "bench"), Located(SIZE, "bench"), Located(SIZE, "bench")],
             "num_classes": CLASSES}
    options = {o.name: coerce_option(o, Located(given[o.name], "bench") if o.name in given else None, o.name)
               for o in pipeline.OPTIONS}
    with scratch_root() as temp, Dataset.started(temp) as dataset:  # a run of its own: its pass starts fresh
        measured = {m.metric: m for m in pipeline.measure(options, Budget(seconds, 600, dataset=dataset))}
    for name in ("samples_per_s", "input_bound", "model_samples_per_s"):
        if measured[name].value is None:
            raise SystemExit(f"bench: the check measured no {name}: {measured[name].reason}")
    return Side(*(float(measured[name].value)  # type: ignore[arg-type]
                  for name in ("samples_per_s", "input_bound", "model_samples_per_s")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latencies", default="0,2,4", help="ms per sample, one volume each (0: the fast one)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--files", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, for both sides")
    parser.add_argument("--busy", type=int, default=0, help="processes spinning (yes > /dev/null) through the "
                        "rounds: a known load in place of whatever other tenants run")
    args = parser.parse_args()
    # one thread: on a shared 2-CPU machine two threads wait on each other's straggler and a step's time swings 2-5x
    # between windows (tests/conftest.py's one_intra_op_thread); both sides run in this process, so both get it
    torch.set_num_threads(args.threads)
    latencies = [float(x) for x in args.latencies.split(",")]
    met = True
    with scratch_root() as where:
        root = os.path.join(where, "data")
        write_tensors(root, args.files)
        src = write_job(where)
        print(f"{args.files} uint8 3x96x96 tensors, tensor_folder -> 3x{SIZE}x{SIZE}, model tiny, batch {BATCH}, "
              f"{args.workers} workers (persistent), {args.seconds:g} s duration; torch threads "
              f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}"
              + (f", {args.busy} busy loops" if args.busy else ""))
        for latency in latencies:
            print(f"volume: {latency:g} ms per sample" + (" (fast: page cache)" if not latency else ""))
            print(f"{'round':>7} {'loop':>8} {'check':>8} {'ratio':>6} {'loop wait':>10} {'input_bound':>12} "
                  f"{'diff':>6} {'alone':>6} {'loop med':>9}")
            with busy(args.busy) if args.busy else contextlib.nullcontext():
                rounds = alternating(
                    args.rounds, lambda: by_loop(root, src, latency, args.workers, args.seconds),
                    lambda: by_check(root, src, latency, args.workers, args.seconds),
                    after=lambda run, loop, check: print(
                        f"{run:>7} {loop.samples_per_s:>8.0f} {check.samples_per_s:>8.0f} "
                        f"{check.samples_per_s / loop.samples_per_s:>6.2f} {loop.wait_percent:>9.0f}% "
                        f"{check.wait_percent:>11.0f}% {check.wait_percent - loop.wait_percent:>+6.0f} "
                        f"{check.alone:>6.0f} {loop.windows:>9.0f}", flush=True))
            ratio = statistics.median(check.samples_per_s / loop.samples_per_s for loop, check in rounds)
            diff = statistics.median(check.wait_percent - loop.wait_percent for loop, check in rounds)
            ok = abs(ratio - 1) <= RATIO_TOLERANCE and abs(diff) <= SHARE_TOLERANCE
            met &= ok
            print(f" median: samples/s ratio {ratio:.2f} (target 0.90-1.10), wait share {diff:+.1f} points "
                  f"(target within 10): {'met' if ok else 'MISSED'}; load average {os.getloadavg()[0]:.1f}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
