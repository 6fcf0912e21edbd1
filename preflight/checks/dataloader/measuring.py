"""The dataloader check's measuring: the files, the job's Dataset or synthetic samples through a DataLoader.

Imported by ``dataloader.measure`` when the check runs (see the package's docstring for the method);
what the loader reads and the loader itself come from ``source``, which the pipeline check shares.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from preflight.checks.base import Budget, Metric
from preflight.checks.dataloader.loop import BatchPuller, explaining_worker_oom
from preflight.checks.dataloader.required import Required, visible_gpus
from preflight.checks.dataloader.source import Source, loader_for, opened
from preflight.measurement import Measurement, unmeasurable
from preflight.sampling import sample
from preflight.units import format_value

WARMUP_BATCHES_PER_WORKER = 2


@explaining_worker_oom
def measure(options: Mapping[str, Any], budget: Budget, metrics: Sequence[Metric]) -> list[Measurement]:
    """Measure the loader built from ``options``; of ``metrics``, those that do not apply are left out."""
    with opened(options) as source:
        if isinstance(source, str):
            return [unmeasurable(m.name, source, m.unit) for m in metrics]
        return _measure(options, budget, source)


def _measure(options: Mapping[str, Any], budget: Budget, source: Source) -> list[Measurement]:
    """The loader over ``source``; every measured row carrying its note."""
    built = loader_for(options, source)
    method, workers = built.method, built.workers
    files = source.files
    decode = options["decode"] if files is not None else "none"
    results: list[Measurement] = []
    raw_rate = None
    if decode == "image":
        raw = BatchPuller(loader_for(options, source, decode="none").loader)
        raw_windows = _windows(raw, max(1, workers), budget)
        results.append(Measurement("raw_throughput", samples=tuple(w[0] for w in raw_windows), unit="samples/s",
                                   method=method + ", raw bytes, not decoded", stopped=raw_windows.stopped))
        raw_rate = results[-1].value
    puller = BatchPuller(built.loader, count=built.count)
    windows = _windows(puller, max(1, workers), budget)
    what = ", decoded with Pillow" if decode == "image" else ""
    throughput = Measurement("throughput", samples=tuple(w[0] for w in windows), unit="samples/s",
                             method=method + what, stopped=windows.stopped,
                             hint=_decode_hint(raw_rate, windows) if raw_rate else "")
    results.append(throughput)
    if files is not None:
        results.append(Measurement("bandwidth", samples=tuple(w[1] for w in windows), unit="MB/s", method=method,
                                   stopped=windows.stopped))
    elif source.job is not None:
        results.append(Measurement("bandwidth", samples=tuple(w[1] for w in windows), unit="MB/s",
                                   method=method + ", bytes of the batches' tensors delivered to the training loop",
                                   stopped=windows.stopped))
    if float(options["step_time"]) > 0:
        results.append(_utilization(puller, float(options["step_time"]), int(options["batch_size"]), workers,
                                    budget, method, throughput))
    if _per_gpu(options["samples_per_gpu"]) != 0:
        results.append(_versus_required(options, throughput))
    fs = built.fs
    if fs is not None and fs.caveat():
        results = [_on_caveat(m, fs.caveat(), fs.memory_backed, options["path"]) for m in results]
    note = source.note
    return [dataclasses.replace(m, note=note) if note and m.measured else m for m in results]


def _on_caveat(m: Measurement, caveat: str, memory: bool, path: str) -> Measurement:
    """Name what the filesystem does to the figure; on tmpfs/ramfs it is cache-bound."""
    if not m.measured:
        return m
    return dataclasses.replace(m, reason=caveat, cache_bound=memory or m.cache_bound,
                               hint=m.hint or f"{path}: {caveat}; point dataloader.path at the dataset volume")


class _Taken(list):  # the windows, and why sampling stopped
    stopped = ""


def _windows(puller: BatchPuller, workers: int, budget: Budget) -> _Taken:
    puller.skip(workers * WARMUP_BATCHES_PER_WORKER)
    seconds = max(0.3, budget.duration_s / 8)
    taken = _Taken()

    def one() -> float:
        taken.append(puller.window(seconds))
        return taken[-1][0]

    taken.stopped = sample(one, budget.duration_s, warmup=0, min_samples=5, target_spread=0.03).stopped
    return taken


def _utilization(puller: BatchPuller, step_s: float, batch: int, workers: int, budget: Budget, method: str,
                 throughput: Measurement) -> Measurement:
    puller.step_time_s = step_s
    windows = _windows(puller, max(1, workers), budget)
    needed = batch / step_s
    full = float(throughput.value)  # type: ignore[arg-type]
    if full >= needed:
        hint = (f"the loader's full speed ({format_value(full, 'samples/s')}) covers what the emulated GPU "
                f"consumes ({format_value(needed, 'samples/s')}) but not steadily: raise prefetch_factor or "
                f"num_workers to absorb stalls")
    else:
        hint = (f"the loader delivers {format_value(full, 'samples/s')} but the emulated GPU consumes "
                f"{format_value(needed, 'samples/s')} (batch_size / step_time): " + (throughput.hint or
                "raise num_workers if CPUs are idle, else use faster storage or shards (WebDataset, LMDB)"))
    return Measurement("accelerator_utilization", samples=tuple(w[2] for w in windows), unit="%",
                       method=f"{method}, emulated compute {step_s * 1e3:g} ms per batch (MLPerf Storage AU)",
                       stopped=windows.stopped, hint=hint)


def _decode_hint(raw_rate: float, windows: _Taken) -> str:
    decoded = sorted(w[0] for w in windows)[len(windows) // 2]
    if raw_rate >= 1.5 * decoded:
        return (f"decode-bound: raw reads deliver {format_value(raw_rate, 'samples/s')}, decoded only "
                f"{format_value(decoded, 'samples/s')}: add workers (CPUs allowing) or decode on the GPU (NVIDIA DALI)")
    return (f"storage-bound: raw reads alone deliver only {format_value(raw_rate, 'samples/s')}: use a faster "
            f"volume, a local NVMe cache, or shards (WebDataset, LMDB)")


def _per_gpu(given: Any) -> float | str:
    """samples/s one GPU consumes: the option's quantity, or the figure the runner passed from a producer
    (``runner.resolve``: ``{"from", "metric", "value", "source"}``), or why that figure is missing."""
    if not isinstance(given, dict):
        return float(given)
    if given.get("value") is None:
        return (f"samples_per_gpu: {given['from']}.{given['metric']} is not available: "
                f"{given.get('reason') or 'the runner passed no figure'}")
    return float(given["value"])


def _versus_required(options: Mapping[str, Any], throughput: Measurement) -> Measurement:
    per_gpu = _per_gpu(options["samples_per_gpu"])
    if isinstance(per_gpu, str):
        return unmeasurable("throughput_vs_required", per_gpu, "%")
    gpus = visible_gpus() if options["gpus"] == "auto" else int(options["gpus"])
    if gpus < 1:
        return unmeasurable("throughput_vs_required", "no CUDA device is visible to count GPUs: set "
                            "dataloader.gpus to the number the job uses", "%")
    given = options["samples_per_gpu"]
    source = given.get("source", "") if isinstance(given, dict) else ""
    required = Required(per_gpu, gpus, float(options["headroom"]), source)
    share = tuple(100 * s / required.rate for s in throughput.samples)
    reason = f"{format_value(throughput.value, 'samples/s')} of {required.arithmetic()}"
    return Measurement("throughput_vs_required", samples=share, unit="%", method=throughput.method, reason=reason,
                       stopped=throughput.stopped, hint=f"this node can feed {float(throughput.value) / required.rate * gpus:.1f} "  # type: ignore[arg-type]
                       f"of its {gpus} GPUs at {required.arithmetic()}: see the throughput fix")
