"""PyTorch DataLoader throughput: samples/s of a real ``torch.utils.data.DataLoader``.

The loader is built with the job's own settings (``batch_size``, ``num_workers``,
``pin_memory``, ``prefetch_factor``) over the files under ``path``: one file is one
sample, read as raw bytes with its cached pages dropped first (posix_fadvise), so the
figure is what storage, workers and collation deliver together. With ``synthetic: true``
each sample is a random 3x224x224 float32 tensor made in the worker: that measures worker
IPC, shared memory and collation only, never storage, and the report says so.

Method: iterate the loader, discard the first batches (workers starting, prefetch
filling), then take samples/s over repeated time windows and compare the median, as
MLPerf Storage / DLIO report samples/s after excluding the first steps.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterator, Mapping

from preflight.checks.base import Budget, Metric, Option
from preflight.cpus import auto_workers
from preflight.measurement import Measurement, unmeasurable
from preflight.sampling import sample
from preflight.scratch import PREFIX

NAME = "dataloader"
HELP = "samples/s of a real torch DataLoader over the dataset files (or synthetic images)"
OPTIONS = (
    Option("path", "path", ".", "dataset directory; every regular file under it is one sample"),
    Option("synthetic", "bool", False, "random 3x224x224 float32 samples instead of files (IPC/shm, not storage)"),
    Option("batch_size", "int", 64, "samples per batch, as the job's DataLoader", minimum=1),
    Option("num_workers", "int_or_auto", "auto", "worker processes; auto = 70% of the CPUs the cgroup allows"),
    Option("pin_memory", "bool", True, "pin batches in page-locked memory (ignored without a CUDA device)"),
    Option("prefetch_factor", "int", 2, "batches each worker loads ahead", minimum=1),
    Option("max_files", "int", 100000, "files under path to sample from", minimum=1),
)
METRICS = (
    Metric("throughput", "samples/s", True, "samples delivered per second after warm-up (median of windows)"),
    Metric("bandwidth", "MB/s", True, "bytes of sample files delivered per second (file mode only)"),
)

WARMUP_BATCHES_PER_WORKER = 2
SYNTHETIC_SHAPE = (3, 224, 224)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure throughput (and, over files, bandwidth) of a DataLoader built from ``options``."""
    import torch

    workers = auto_workers() if options["num_workers"] == "auto" else int(options["num_workers"])
    pin = bool(options["pin_memory"]) and torch.cuda.is_available()
    if options["synthetic"]:
        dataset: torch.utils.data.Dataset = SyntheticImages()
        source = "synthetic 3x224x224 float32 samples (measures IPC and collation, not storage)"
    else:
        files = list_files(options["path"], int(options["max_files"]))
        if not files:
            reason = f"no readable files under {options['path']}: point dataloader.path at the dataset"
            return [unmeasurable(metric.name, reason, metric.unit) for metric in METRICS]
        dataset = FileBytes(files)
        source = f"{len(files)} files under {options['path']}, cold cache per file"
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=int(options["batch_size"]),
        shuffle=not options["synthetic"],
        num_workers=workers,
        pin_memory=pin,
        prefetch_factor=int(options["prefetch_factor"]) if workers else None,
        persistent_workers=workers > 0,
        collate_fn=None if options["synthetic"] else collate_sizes,
    )
    method = (
        f"DataLoader(batch_size={options['batch_size']}, num_workers={workers}, pin_memory={pin}, "
        f"prefetch_factor={options['prefetch_factor'] if workers else None}) over {source}"
    )
    counter = _Counter(loader)
    counter.skip(max(1, workers) * WARMUP_BATCHES_PER_WORKER)
    window = max(0.2, budget.duration_s / 10)
    rates: list[tuple[float, float]] = []

    def one_window() -> float:
        rates.append(counter.rate_over(window))
        return rates[-1][0]

    samples = sample(one_window, budget.duration_s, warmup=0, min_samples=5, target_spread=0.03)
    results = [Measurement("throughput", samples=samples.values, unit="samples/s", method=method,
                           stopped=samples.stopped)]
    if not options["synthetic"]:
        results.append(Measurement("bandwidth", samples=tuple(b for _, b in rates), unit="MB/s", method=method,
                                   stopped=samples.stopped))
    return results


def list_files(path: str, max_files: int) -> list[str]:
    """Readable, non-empty regular files under ``path`` (sorted, at most ``max_files``)."""
    found: list[str] = []
    for root, directories, names in os.walk(path, onerror=lambda error: None):
        directories[:] = sorted(d for d in directories if not d.startswith(PREFIX))
        for name in sorted(names):
            full = os.path.join(root, name)
            try:
                if os.path.isfile(full) and os.path.getsize(full) > 0 and os.access(full, os.R_OK):
                    found.append(full)
            except OSError:
                continue
            if len(found) >= max_files:
                return found
    return found


class FileBytes:
    """Map-style dataset: sample i is the raw bytes of file i, read with its page cache dropped."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> int:
        fd = os.open(self.files[index], os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            size = 0
            while chunk := os.read(fd, 1 << 20):
                size += len(chunk)
            return size
        finally:
            os.close(fd)


def collate_sizes(batch: list[int]) -> tuple[int, int]:
    """Collate a batch of file samples into (sample count, byte count)."""
    return len(batch), sum(batch)


class SyntheticImages:
    """Map-style dataset of random 3x224x224 float32 tensors (ImageNet-sized, 588 KiB each)."""

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> Any:
        import torch

        return torch.rand(SYNTHETIC_SHAPE)


class _Counter:
    """Pulls batches from an endless loader iterator and counts samples and bytes per time window."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.iterator: Iterator[Any] = iter(loader)

    def _next(self) -> tuple[int, int]:
        try:
            batch = next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.loader)
            batch = next(self.iterator)
        if isinstance(batch, tuple):
            return batch
        return len(batch), batch.element_size() * batch.nelement()

    def skip(self, batches: int) -> None:
        for _ in range(batches):
            self._next()

    def rate_over(self, seconds: float) -> tuple[float, float]:
        """(samples/s, MB/s) over at least ``seconds`` of whole batches."""
        start = time.perf_counter()
        count = size = 0
        while True:
            samples, nbytes = self._next()
            count, size = count + samples, size + nbytes
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return count / elapsed, size / elapsed / 1e6
