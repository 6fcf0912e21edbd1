"""The dataloader check's measuring: the files, tar shards, the job's Dataset or synthetic samples through a DataLoader.

Imported by ``dataloader.measure`` when the check runs (see the package's docstring for the method).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from preflight.checks import usercode
from preflight.checks.base import Budget, Metric, UserCodeError
from preflight.checks.dataloader import shards, user
from preflight.checks.dataloader.files import FileSamples, collate_sizes, list_files
from preflight.checks.dataloader.loop import BatchPuller, EmptyLoader, Window, explaining_worker_oom, sizes_or_tensor
from preflight.checks.dataloader.required import Required, visible_gpus
from preflight.host.cpus import auto_workers
from preflight.io.dataset_walk import DataFile, too_few
from preflight.host.fsinfo import filesystem_of
from preflight.io.uncached import bypass_for
from preflight.measurement import Measurement, unmeasurable
from preflight.sampling import sample
from preflight.io.scratch import choose_parent, room_for, scratch_dir, write_small_files
from preflight.units import format_value

WARMUP_BATCHES_PER_WORKER = 2
SYNTHETIC_SHAPE = (3, 224, 224)
SCRATCH_SET = (1000, 110_000)  # files, bytes each: ImageNet's median JPEG is about 110 kB


@explaining_worker_oom
def measure(options: Mapping[str, Any], budget: Budget, metrics: Sequence[Metric]) -> list[Measurement]:
    """Measure the loader built from ``options``; of ``metrics``, those that do not apply are left out."""
    if options["dataset"]:
        return _measure_job_dataset(options, budget)
    if options["synthetic"]:
        return _measure(options, budget, None, "synthetic 3x224x224 float32 samples (measures IPC and collation, "
                        "not storage)", "")
    path = options["path"]
    if not os.path.isdir(path):
        reason = (f"{path} is not a directory: point dataloader.path at the dataset's directory" if os.path.exists(path)
                  else f"{path} does not exist: mount the dataset or set dataloader.path")
        return [unmeasurable(m.name, reason, m.unit) for m in metrics]
    if options["decode"] == "image" and importlib.util.find_spec("PIL") is None:
        reason = "decode: image needs Pillow: pip install 'train-preflight[image]' (or pillow) in this image"
        return [unmeasurable(m.name, reason, m.unit) for m in metrics]
    files, walk = list_files(path, options["include"], options["exclude"], int(options["max_files"]))
    skipped = walk.summary()
    source = (f"{len(files)} files under {path}" + (f" ({skipped} skipped)" if skipped else "")
              + ", cold cache per file")
    if not files:
        reason = (f"no readable files under {path} match include={options['include']!r} "
                  f"exclude={options['exclude']!r}" + (f" ({skipped} skipped)" if skipped else "")
                  + ": point dataloader.path at the dataset")
        return [unmeasurable(m.name, reason, m.unit) for m in metrics]
    globs = f" (include={options['include']!r} exclude={options['exclude']!r})"
    too_little = too_few(files, path + (globs if (options["include"], options["exclude"]) != ("*", "") else ""))
    if options["format"] == "tar":
        if too_little:
            reason = f"{too_little}: point dataloader.path at the shards (no scratch set stands in for tar shards)"
            return [unmeasurable(m.name, reason, m.unit) for m in metrics]
        source = (f"{len(files)} tar shards (WebDataset) under {path}" + (f" ({skipped} skipped)" if skipped else "")
                  + ", each streamed whole, cold")
        try:
            return _measure(options, budget, files, source, f"skipped under {path}: {skipped}" if skipped else "")
        except _NoSample as error:
            return [unmeasurable(m.name, str(error), m.unit) for m in metrics]
    if not too_little:
        return _measure(options, budget, files, source, f"skipped under {path}: {skipped}" if skipped else "")
    if options["decode"] == "image":
        reason = f"{too_little}: point dataloader.path at the dataset (scratch bytes cannot be decoded as images)"
        return [unmeasurable(m.name, reason, m.unit) for m in metrics]
    parent, no_scratch = choose_parent(path, options["scratch_dir"], "dataloader.scratch_dir")
    count, size = SCRATCH_SET
    no_room = no_scratch or room_for(parent, count * (size + 4096))  # type: ignore[arg-type]
    if no_room:
        reason = f"{too_little}: point dataloader.path at the dataset; no scratch set either: {no_room}"
        return [unmeasurable(m.name, reason, m.unit) for m in metrics]
    with scratch_dir(parent, protect=path) as directory:  # type: ignore[arg-type]
        scratch = write_small_files(directory, count, size)
        source = f"{count} scratch files of {size // 1000} kB in ImageNet-style class folders, cold cache per file"
        return _measure(options, budget, scratch, source, f"on an ImageNet-shaped scratch set: {too_little}")


class _NoSample(Exception):
    """No sample could be read from any shard: the reason, for every metric."""


def _measure_job_dataset(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """The loader over the job's own Dataset; what its code raises becomes one line naming it (``UserCodeRaised``)."""
    with usercode.on_path(options["python_path"]):
        try:
            job = user.build(options)
        except UserCodeError as error:
            raise usercode.UserCodeRaised(f"dataloader.{error.option}: {error}", error.option) from None
        kind = "iterable" if _iterable(job[0]) else f"{len(job[0])} samples"  # a DataLoader needs its len()
        source = (f"{options['dataset']}(**dataset_args) ({type(job[0]).__name__}, {kind}), collate_fn="
                  f"{options['collate_fn'] or 'default_collate'}")
        try:
            return _measure(options, budget, None, source, "", job)
        except Exception as error:  # noqa: BLE001  only the job's own exceptions are re-worded
            if "Original Traceback" not in str(error) and not usercode.blame_frames(error):
                raise  # preflight's or torch's own failure (a dead worker): as it is
            raise usercode.UserCodeRaised(f"dataloader.dataset: {usercode.blame(error)}: raised while the "
                                          f"DataLoader loaded batches", "dataset") from None


def _iterable(dataset: Any) -> bool:
    import torch.utils.data

    return isinstance(dataset, torch.utils.data.IterableDataset)


def _measure(options: Mapping[str, Any], budget: Budget, files: list[DataFile] | None, source: str,
             note: str, job: tuple[Any, Any] | None = None) -> list[Measurement]:
    """The loader over ``files``, else the ``job``'s (dataset, collate_fn), else synthetic samples; every row
    carrying ``note``."""
    import torch

    workers = auto_workers() if options["num_workers"] == "auto" else int(options["num_workers"])
    pin = bool(options["pin_memory"]) and torch.cuda.is_available()
    decode = options["decode"] if files is not None else "none"
    fs = None
    shuffle, collate, count = files is not None, None if files is None else collate_sizes, sizes_or_tensor
    tally = shards.ShardTally()
    if job is not None:
        dataset: Any = job[0]
        shuffle, collate, count = not _iterable(dataset), job[1], user.count_batch
    elif files is None:
        dataset = SyntheticImages()
    else:
        fs = filesystem_of(os.path.dirname(files[0].name))  # the directory stays when a file vanishes
        bypass = bypass_for([f.name for f in files[:100]], fs.memory_backed)
        samples: Any = shards.ShardSamples if options["format"] == "tar" else FileSamples
        if options["format"] == "tar":  # an IterableDataset: each worker streams its own shards, in order
            shuffle, collate, count = False, shards.collate_items, tally
        dataset = samples(files, bypass, decode, float(options["sample_delay"]))
        source += f" ({bypass})"

    def make_loader(data: Any) -> Any:
        return torch.utils.data.DataLoader(
            data, batch_size=int(options["batch_size"]), shuffle=shuffle, num_workers=workers,
            pin_memory=pin, prefetch_factor=int(options["prefetch_factor"]) if workers else None,
            persistent_workers=workers > 0, collate_fn=collate)

    pools = int(options["worker_pools"])
    method = (f"DataLoader(batch_size={options['batch_size']}, num_workers={workers}, pin_memory={pin}, "
              f"prefetch_factor={options['prefetch_factor'] if workers else None}) over {source}")
    tar = files is not None and options["format"] == "tar"

    def take(pulling: BatchPuller, share: Budget, min_windows: int) -> _Taken:
        try:
            return _windows(pulling, max(1, workers), share, min_windows)
        except EmptyLoader:  # no shard holds a member named KEY.EXT: reported below, with the shards' problems
            if not tar:
                raise
            return _Taken([Window(0.0, 0.0, 0.0)])

    results: list[Measurement] = []
    raw_rate = None
    if decode == "image":
        raw_data = samples(files, bypass, "none", float(options["sample_delay"]))
        raw = _pooled(lambda: BatchPuller(make_loader(raw_data), count=count), take, budget, pools)
        results.append(Measurement("raw_throughput", raw.rate, "samples/s", samples=raw.rates,
                                   method=method + raw.method + ", raw bytes, not decoded", stopped=raw.stopped))
        raw_rate = raw.rate
    taken = _pooled(lambda: BatchPuller(make_loader(dataset), count=count), take, budget, pools)
    if tar:
        count_files = len(files)  # type: ignore[arg-type]
        problems = tally.note(count_files)
        if not any(taken.rates):  # every shard damaged, or no member named KEY.EXT
            raise _NoSample(f"no sample could be read from the {count_files} files under {options['path']}"
                            + (f" ({problems})" if problems else "") + ": point dataloader.path at WebDataset tar "
                            "shards, and include at their names (\"*.tar\")")
        note = "; ".join(part for part in (note, problems) if part)
    what = ", decoded with Pillow" if decode == "image" else ""
    throughput = Measurement("throughput", taken.rate, "samples/s", samples=taken.rates,
                             method=method + taken.method + what, stopped=taken.stopped,
                             hint=_decode_hint(raw_rate, taken.rate) if raw_rate else "")
    results.append(throughput)
    if files is not None:
        bytes_are = ", payload bytes of the samples' members (tar headers and padding not counted)" if tar else ""
        results.append(Measurement("bandwidth", taken.mb_rate, "MB/s", samples=taken.mb_rates,
                                   method=method + taken.method + bytes_are, stopped=taken.stopped))
    elif job is not None:
        results.append(Measurement("bandwidth", taken.mb_rate, "MB/s", samples=taken.mb_rates,
                                   method=method + taken.method + ", bytes of the batches' tensors delivered to "
                                   "the training loop", stopped=taken.stopped))
    puller = taken.last
    if float(options["step_time"]) > 0:
        results.append(_utilization(puller, float(options["step_time"]), int(options["batch_size"]), workers,
                                    budget, method, throughput))
    if float(options["samples_per_gpu"]) > 0:
        results.append(_versus_required(options, throughput))
    if fs is not None and fs.caveat():
        results = [_on_caveat(m, fs.caveat(), fs.memory_backed, options["path"]) for m in results]
    return [dataclasses.replace(m, note=note) if note and m.measured else m for m in results]


def _on_caveat(m: Measurement, caveat: str, memory: bool, path: str) -> Measurement:
    """Name what the filesystem does to the figure; on tmpfs/ramfs it is cache-bound."""
    if not m.measured:
        return m
    return dataclasses.replace(m, reason=caveat, cache_bound=memory or m.cache_bound,
                               hint=m.hint or f"{path}: {caveat}; point dataloader.path at the dataset volume")


class _Taken(list):  # the windows, and why sampling stopped
    stopped = ""


def _windows(puller: BatchPuller, workers: int, budget: Budget, min_windows: int = 5) -> _Taken:
    puller.skip(workers * WARMUP_BATCHES_PER_WORKER)
    seconds = max(0.3, budget.duration_s / 8)
    taken = _Taken()

    def one() -> float:
        taken.append(puller.window(seconds))
        return taken[-1][0]

    taken.stopped = sample(one, budget.duration_s, warmup=0, min_samples=min_windows, target_spread=0.03).stopped
    return taken


class Pools(NamedTuple):
    """Rates over several fresh worker pools: each pool's (``rates``, ``mb_rates``) and their means."""

    rates: tuple[float, ...]  # samples/s of each pool, over its windows after warm-up
    mb_rates: tuple[float, ...]  # MB/s of each pool
    stopped: str  # why the last pool's sampling stopped
    last: BatchPuller  # the last pool, still running (the AU phase continues on it)

    @property
    def rate(self) -> float:
        return sum(self.rates) / len(self.rates)

    @property
    def mb_rate(self) -> float:
        return sum(self.mb_rates) / len(self.mb_rates)

    @property
    def method(self) -> str:
        return f", mean of {len(self.rates)} fresh worker pools" if len(self.rates) > 1 else ""


def _pooled(start_pool: Callable[[], BatchPuller], take: Callable[[BatchPuller, Budget, int], _Taken],
            budget: Budget, pools: int) -> Pools:
    """Measure ``pools`` fresh worker pools in turn, each for an equal share of the budget.

    A pool's rate can depend on state fixed when its workers start (which CPUs they land on,
    beside the main process or not): a one-worker loader on this project's 2-CPU machine ran at
    about 9,500 or 6,500 samples/s for a whole run. One pool is one draw of that state; the
    mean of several is what a job sees whose DataLoader restarts its workers every epoch
    (torch's default, ``persistent_workers=False``), and its run-to-run variation shrinks with
    the square root of the pool count. Each pool's rate is kept in ``samples``, so a node where
    pools differ shows the spread.
    """
    share = Budget(budget.duration_s / pools, budget.timeout_s)
    rates, mb_rates = [], []
    puller = None
    for _ in range(pools):
        puller = None  # drop the previous pool first: its workers exit before the next pool's start
        puller = start_pool()
        windows = take(puller, share, max(2, -(-5 // pools)))
        rates.append(sum(w.samples_per_s for w in windows) / len(windows))  # windows of equal length
        mb_rates.append(sum(w.mb_per_s for w in windows) / len(windows))
    return Pools(tuple(rates), tuple(mb_rates), windows.stopped, puller)  # type: ignore[arg-type]


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


def _decode_hint(raw_rate: float, decoded: float) -> str:
    if raw_rate >= 1.5 * decoded:
        return (f"decode-bound: raw reads deliver {format_value(raw_rate, 'samples/s')}, decoded only "
                f"{format_value(decoded, 'samples/s')}: add workers (CPUs allowing) or decode on the GPU (NVIDIA DALI)")
    return (f"storage-bound: raw reads alone deliver only {format_value(raw_rate, 'samples/s')}: use a faster "
            f"volume, a local NVMe cache, or shards (WebDataset, LMDB)")


def _versus_required(options: Mapping[str, Any], throughput: Measurement) -> Measurement:
    gpus = visible_gpus() if options["gpus"] == "auto" else int(options["gpus"])
    if gpus < 1:
        return unmeasurable("throughput_vs_required", "no CUDA device is visible to count GPUs: set "
                            "dataloader.gpus to the number the job uses", "%")
    required = Required(float(options["samples_per_gpu"]), gpus, float(options["headroom"]))
    share = tuple(100 * s / required.rate for s in throughput.samples)
    reason = f"{format_value(throughput.value, 'samples/s')} of {required.arithmetic()}"
    return Measurement("throughput_vs_required", 100 * float(throughput.value) / required.rate, "%",  # type: ignore[arg-type]
                       samples=share, method=throughput.method, reason=reason,
                       stopped=throughput.stopped, hint=f"this node can feed {float(throughput.value) / required.rate * gpus:.1f} "  # type: ignore[arg-type]
                       f"of its {gpus} GPUs at {required.arithmetic()}: see the throughput fix")


class SyntheticImages:
    """Map-style dataset of random 3x224x224 float32 tensors (ImageNet-sized, 588 KiB each)."""

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> Any:
        import torch

        return torch.rand(SYNTHETIC_SHAPE)
