"""The dataloader check's measuring: the files, tar shards, the job's Dataset or synthetic samples through a DataLoader.

Imported by ``dataloader.measure`` when the check runs (see the package's docstring for the method);
what the loader reads and the loader itself come from ``source``, which the pipeline check shares.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from preflight import sampling
from preflight.checks import dataset_path, subject
from preflight.checks.base import Budget, Metric, Produced
from preflight.loading.footprint import memory, shared_memory, tasks
from preflight.checks.dataloader import phase_names, phases, sweep
from preflight.loading.scan import rest_of_pass
from preflight.loading.loop import (BatchPuller, EmptyLoader, Pools, Taken, Window, explaining_worker_oom,
                                             pooled, windows)
from preflight.checks.dataloader.required import Required, visible_gpus
from preflight.loading.source import Loader, Source, loader_for, opened
from preflight.loading.user import Uncountable
from preflight.host import pids
from preflight.host.cpus import WAITING_SHARE, available_cpus, for_waiting
from preflight.io.dataset import failures_note
from preflight.measurement import Measurement, not_applicable, unmeasurable, verdict_floor
from preflight.units import format_value

@explaining_worker_oom
def measure(options: Mapping[str, Any], budget: Budget, metrics: Sequence[Metric]) -> list[Measurement]:
    """Measure the loader built from ``options``; of ``metrics``, those that do not apply are left out.

    ``pids_available`` is a fact, read before anything starts and reported whatever fails after it. A
    loader killed by a pids limit (a thread or worker refused with EAGAIN) makes every other metric
    unmeasurable with "pids limit N reached (FILE)" and the fix (``tasks.refused``)."""
    limits = pids.read()  # before the walk's and the loader's threads: what the job's loader starts from
    deadline = time.monotonic() + budget.timeout_s * SCAN_SHARE  # where a scan: all stops, the rows still reported
    mount = dataset_path.mounted(options["path"] or ".") if not _reads_no_files(options) else None
    try:
        with opened(options, budget, "dataloader") as source:
            if isinstance(source, str):
                results = [unmeasurable(m.name, source, m.unit) for m in metrics]
            else:
                try:
                    results = _measure(options, budget, source, limits, deadline)
                except (_NoSample, Uncountable) as error:
                    results = [unmeasurable(m.name, str(error), m.unit) for m in metrics]
                except _ShmShort as short:  # no pool started: the shm rows, and why the others have no figure
                    results = short.rows + [unmeasurable(m.name, str(short), m.unit) for m in metrics
                                            if m.name not in shared_memory.ROWS]
                except (RuntimeError, PermissionError) as error:  # before ``opened`` blames the job's Dataset
                    why = shared_memory.died_of(error) or shared_memory.denied(error)
                    if why is None:
                        raise
                    results = [unmeasurable(m.name, why, m.unit) for m in metrics]
    except Exception as error:  # noqa: BLE001  only a refused thread or process is answered here
        why = tasks.refused(limits, error, options)
        if why is None:
            raise
        results = [unmeasurable(m.name, why, m.unit) for m in metrics]
    results = [m for m in results if m.metric not in ("pids_available", "mounted")]
    return [tasks.fact(limits)] + ([mount] if mount is not None else []) + results


class _NoSample(Exception):
    """No sample could be read from any shard: the reason, for every metric."""


class _ShmShort(Exception):
    """The job's batches in flight would not fit /dev/shm (``shared_memory.Need.short``): the two rows, and the reason
    the other metrics carry."""

    def __init__(self, reason: str, rows: list[Measurement]) -> None:
        super().__init__(reason)
        self.rows = rows


def _measure(options: Mapping[str, Any], budget: Budget, source: Source, limits: pids.Limits,
             deadline: float = math.inf) -> list[Measurement]:
    """The loader over ``source``; every measured row carrying its note."""
    # With decode: image the raw reads and the decoded loader each read half the files, once: a decoded pass over
    # files the raw phase just read would be a second touch (``io.dataset``), not the job's first epoch.
    # With scan: all every file is decoded, once: no half is left to raw reads (raw_throughput is not measured).
    scan = options.get("scan") == "all"
    halves = source.files is not None and options["decode"] == "image" and options["format"] != "tar" and not scan
    built = loader_for(options, source._replace(files=source.files[1::2]) if halves else source)  # type: ignore[index]
    # One batch loaded in this process, before any worker: a projection past /dev/shm's free space starts no pool,
    # whose workers would die with a bus error as the job's would (issue 36).
    shm = shared_memory.need(options, source, built)
    cpu_share = shm.cpu_share if isinstance(shm, shared_memory.Need) else None
    waiting = for_waiting(cpu_share, available_cpus()) if cpu_share is not None and cpu_share < WAITING_SHARE else 0
    if options["num_workers"] == "auto" and not options.get("loader") and waiting > built.workers:  # the loader waits
        built = loader_for({**options, "num_workers": waiting}, source)
        shm = shm._replace(workers=built.workers, prefetch=built.prefetch_factor)  # type: ignore[union-attr]
    shm_rows = shm.rows(built.method) if isinstance(shm, shared_memory.Need) else shm
    if isinstance(shm, shared_memory.Need) and shm.short:
        raise _ShmShort(shm.why_not_started(), [dataclasses.replace(m, subject=source.subject) for m in shm_rows])
    tensor_worker = tasks.probe(built.workers)  # a worker's tasks, measured before any pool holds the limit's tasks
    method, workers, pools = built.method, built.workers, int(options["worker_pools"])
    files = source.files
    decode = options["decode"] if files is not None else "none"
    tar = files is not None and options["format"] == "tar"
    note = source.note
    stream = built.first_pass is None and (source.job is not None or tar)  # read once as the job reads it in
    if stream:
        pools = 1  # an epoch: a fresh pool would start it again and read its samples twice

    def decider(metric: str) -> Any:  # more pools while undecided: never on a stream, which they would reread
        if stream:
            return None
        own = phase.decider(metric, statistics.fmean)  # the figure: the pools' mean
        required = _required(options) if metric == "throughput" else None
        share = phase.bounds.get("throughput_vs_required") if isinstance(required, Required) else None
        if share is None:
            return own
        # throughput_vs_required is throughput over a fixed rate: its % bounds are samples/s bounds on the same pools
        rate = required.rate / 100  # type: ignore[union-attr]
        versus = phase._replace(bounds={metric: tuple(None if b is None else b * rate for b in share)}
                                ).decider(metric, statistics.fmean)
        return versus if own is None else lambda samples, span_s: own(samples, span_s) and versus(samples, span_s)

    def take(pulling: BatchPuller, share: Budget, min_windows: int) -> Taken:
        try:
            return windows(pulling, max(1, workers), share, min_windows)
        except EmptyLoader:  # no shard holds a member named KEY.EXT: reported below, with the shards' problems
            if not tar:
                raise
            return Taken([Window(0.0, 0.0, 0.0)])

    results: list[Measurement] = []
    raw_rate = None
    raw_built: Loader | None = None
    sampled = ""  # how much of the dataset unreadable_samples counts over, where its pass read part of it
    read_all = False  # scan: all read every file
    phase = budget.split(phases(options))
    if decode == "image" and scan:
        results.append(not_applicable("raw_throughput", "scan: all decodes every file, so none is left to read raw"))
    elif decode == "image":
        raw_built = loader_for(options, source._replace(files=files[0::2]) if halves else source,  # type: ignore[index]
                               decode="none")
        raw = pooled(lambda: _puller(raw_built), take, phase, pools, handed_out=_handed_out(raw_built),
                     left_in_pass=_left_in_pass(raw_built), decided=decider("raw_throughput"))
        shortfall = "" if decider("raw_throughput") else raw.shortfall(phase_names(options))
        results.append(Measurement("raw_throughput", raw.rate, "samples/s", samples=raw.spread[0], floor=RUN_TO_RUN,
                                   method=method + raw.method + ", raw bytes, not decoded", stopped=raw.stopped,
                                   warnings=(shortfall,) if shortfall else ()))
        raw_rate = raw.rate
    watch = memory.Watch()
    ended: list[int] = []  # each pool's epochs read to their end

    def take_counting_epochs(pulling: BatchPuller, share: Budget, min_windows: int) -> Taken:
        try:
            return take(pulling, share, min_windows)
        finally:
            ended.append(pulling.epochs_ended)

    taken = pooled(lambda: _puller(built, watch), take_counting_epochs, phase, pools, handed_out=_handed_out(built),
                   left_in_pass=_left_in_pass(built), decided=decider("throughput"))
    if tar:  # every pool streams the shards in one order: one epoch ended is every shard tallied
        read_all = any(ended) or (not any(taken.rates) and taken.last.finish_epoch(phase.duration_s))
        problems = built.tally.note(len(files), read_all)  # type: ignore[union-attr,arg-type]
        if not any(taken.rates):  # every shard damaged, or no member named KEY.EXT
            raise _NoSample(f"no sample could be read from the {len(files)} files under {options['path']}"  # type: ignore[arg-type]
                            + (f" ({problems})" if problems else "") + ": point dataloader.path at WebDataset tar "
                            "shards, and include at their names (\"*.tar\")")
        note = "; ".join(part for part in (note, problems) if part)
    if built.replays is not None:
        note = "; ".join(part for part in (note, built.replays.note(workers)) if part)
    first = built.first_pass
    if first is not None and (first.warm or first.read_before):  # a reread, or a pass that other checks began
        note = "; ".join(part for part in (note, first.describe()) if part)
    what = ", decoded with Pillow" if decode == "image" else ""
    if raw_rate:
        hint = _decode_hint(raw_rate, taken.rate)
    elif tar:  # the metric's own hint says to pack files into shards: these are shards already
        hint = (f"the loader delivers {format_value(taken.rate, 'samples/s')} from {len(files)} tar shards: raise "  # type: ignore[arg-type]
                f"num_workers if CPUs are idle (each worker streams whole shards, so keep at least as many shards "
                f"as workers), else use a faster volume or a local NVMe cache")
    elif source.job is not None:  # the job's own code sets the pace, not the volume (storage may say otherwise)
        hint = JOB_DATASET_HINT.format(measured=format_value(taken.rate, "samples/s"))  # type: ignore[arg-type]
    elif built.fs is not None and built.fs.caveat():  # tmpfs, a page cache: the figure is not the volume's
        hint = _caveat_hint(built.fs.caveat(), options["path"])
    elif files is not None:  # raw files, not decoded: the reads set the pace
        hint = (f"the loader delivers {format_value(taken.rate, 'samples/s')} reading files without decoding: raise "
                f"num_workers if CPUs are idle, else use a faster volume or pack files into shards (WebDataset, "
                f"LMDB)")
    else:  # synthetic samples: nothing is read; shared memory and collation set the pace, not storage
        hint = (f"the loader delivers {format_value(taken.rate, 'samples/s')} of synthetic samples, nothing read "
                f"from storage (shared memory and collation set this pace): raise num_workers if CPUs are idle")
    throughput = Measurement("throughput", taken.rate, "samples/s", samples=taken.spread[0], floor=RUN_TO_RUN,
                             method=method + taken.method + what, stopped=taken.stopped, hint=hint)
    results.append(throughput)
    if files is not None:
        bytes_are = ", payload bytes of the samples' members (tar headers and padding not counted)" if tar else ""
        results.append(Measurement("bandwidth", taken.mb_rate, "MB/s", samples=taken.spread[1], floor=RUN_TO_RUN,
                                   method=method + taken.method + bytes_are, stopped=taken.stopped))
    elif source.job is not None:
        results.append(Measurement("bandwidth", taken.mb_rate, "MB/s", samples=taken.spread[1], floor=RUN_TO_RUN,
                                   method=method + taken.method + ", bytes of the batches' tensors delivered to "
                                   "the training loop (strings and other objects count 0)", stopped=taken.stopped))
    puller = taken.last
    if float(options["step_time"]) > 0:
        watch.stop()  # the loader's memory was read over the pools' windows; these are the emulated steps'
        results.append(_utilization(puller, float(options["step_time"]), built.batch_size or 1, workers,
                                    phase, method, throughput))
    if _per_gpu(options["samples_per_gpu"]) != 0:
        results.append(_versus_required(options, throughput))
    fs = built.fs
    if fs is not None and fs.caveat():
        results = [_on_caveat(m, fs.caveat(), fs.memory_backed, options["path"]) for m in results]
    if source.cache_bound:  # the job's Dataset's files stayed in the page cache (``cold``): memory's figures
        results = [dataclasses.replace(m, cache_bound=True) if m.measured and m.metric in READ_ROWS else m
                   for m in results]
    if options.get("scan") == "all" and files is not None and not tar:  # every file left in the pass, read once
        scanned = rest_of_pass(built, max(0.0, deadline - time.monotonic()))
        note = "; ".join(filter(None, (note, scanned.said(len(files)))))
        read_all = not scanned.left
    if files is not None and not tar:  # per-sample failures: counted where the sample was read, the first named
        assert source.data is not None  # ``opened`` gives every source the run's dataset
        # its own: what other checks met under the path is added to the row when the run ends (``runner``)
        failed = source.data.failures([f.name for f in files], by=source.data.reader)
        results.append(Measurement("unreadable_samples", float(len(failed)), "", method=method + ", each sample of "
                                   "the pass read (and decoded) by the workers; a failure counted, not raised"))
        said = failures_note(failed, len(files), len(files[1::2]) if halves else None)
        note = "; ".join(part for part in (note, said) if part)
        sampled = "" if read_all else _read_of(built, raw_built if halves else None, len(files), len(failed))
    else:  # no file the loader reads itself: the bundled {max: 0} must not fail on a row that cannot exist here
        results.append(not_applicable("unreadable_samples", _no_sample_files(source, tar)))
    results += watch.measurements(_epoch(source, tar), workers, built.prefetch_factor, method,
                                  source.job.footprint if source.job is not None else None)
    results.append(tasks.headroom(limits, watch.tasks(), options, workers, method, tensor_worker))
    results += shm_rows
    results.append(sweep.used(options, workers, method, cpu_share))
    results = [dataclasses.replace(m, note=note) if note and m.measured else m for m in results]
    if sampled:  # a count over part of the dataset says so in the table, not only in the JSON (issue 43)
        results = [dataclasses.replace(m, note="; ".join(filter(None, (m.note, sampled))))
                   if m.metric == "unreadable_samples" and m.measured else m for m in results]
    threads = tasks.oversubscribed(watch.tasks(), workers, tensor_worker, available_cpus())
    if threads:  # the rates are lower than the job's workers would read with one thread each: the rows say why
        results = [dataclasses.replace(m, note="; ".join(filter(None, (m.note, threads))),
                                       hint=f"{threads}; {m.hint}" if m.hint else threads)
                   if m.metric in ("throughput", "bandwidth") and m.measured else m for m in results]
    # Fewer pools than worker_pools, or a pass read in well under a second (as rough as storage's small_files over
    # the same files): the loader's rates are a rougher draw than asked for, and say so.
    # With a threshold, fewer pools is a reason the sampling extended (``pooled``), not a warning to act on.
    shortfall = "" if decider("throughput") else taken.shortfall(phase_names(options))
    rough = tuple(w for w in (shortfall, _short(taken, files, halves)) if w)
    if rough:
        results = [dataclasses.replace(m, warnings=(*m.warnings, *rough))
                   if m.measured and m.metric in ("throughput", "bandwidth", "throughput_vs_required") else m
                   for m in results]
    if options["worker_sweep"]:  # after the source's note: this row's own note is the curve
        puller.close()  # the throughput's last pool exits before the sweep's pools start (memory, pids)
        del puller, taken
        try:
            results.append(sweep.measure(options, source, phase, workers, method, watch.fits,
                                         shm.fits if isinstance(shm, shared_memory.Need) else lambda n: True,
                                         cpu_share))
        except Exception as error:  # noqa: BLE001  a count past the pids limit costs the sweep, not the rows above
            why = tasks.refused(limits, error, options)
            if why is None:
                raise
            results.append(unmeasurable("recommended_num_workers", f"the sweep's larger pools: {why}", ""))
    fix = subject.no_dataset_fix("dataloader") if source.subject == "no_dataset" else None
    measured_on = subject.of_reads(source.subject, first is not None and first.warm, built.fs)
    return [dataclasses.replace(m, subject=measured_on if m.metric in READ_ROWS else source.subject, hint=fix or m.hint)
            for m in results]


# The rows whose figure is the pass's reading rate: a reread of them on a cache below the page cache cannot pass.
# The least half-width of a rate's interval (±35%: 2.576 x the 13.4% run-to-run CV of dataloader.throughput). A run's
# pools share its moment (the load beside it, the cache's state), so more pools do not narrow it: the floor itself, not
# held over the pools' count. Busy, without it a 1.0x threshold passed 6 runs and failed 1 (verdict_stability).
RUN_TO_RUN = verdict_floor("dataloader.throughput")
READ_ROWS = ("raw_throughput", "throughput", "bandwidth", "throughput_vs_required", "accelerator_utilization")


# With `dataset:` the samples come through the job's own __getitem__: its decode, transforms and per-sample I/O
# set the pace, so "use a faster volume" points the wrong way (issue 25: storage measured 9,432 files/s on that
# node). ``verdict.storage_first`` puts the volume first when the storage check missed too.
SCAN_SHARE = 0.85  # of the timeout, where scan: all stops reading, so the rows are reported before the kill
JOB_DATASET_HINT = ("the job's Dataset delivers {measured}: its own code sets this pace (decode, transforms, "
                    "per-sample I/O in __getitem__): profile one worker (num_workers: 0 under py-spy or cProfile), "
                    "move decode or augmentation to the GPU (NVIDIA DALI, torchvision.transforms.v2 on tensors), "
                    "or raise num_workers if CPUs are idle")


def _puller(built: Loader, watch: memory.Watch | None = None) -> BatchPuller:
    """A fresh DataLoader from ``built`` (a new pool of workers), counted its own way; its memory read by ``watch``."""
    counted = built.fresh()
    if watch is not None:
        return watch.puller(counted.dataloader, counted.count)
    return BatchPuller(counted.dataloader, count=counted.count)


def _handed_out(built: Loader) -> Callable[[], bool]:
    """Whether ``built``'s one pass has handed out every index (``PassSampler.spent``): a fresh pool would read again."""
    first = built.first_pass
    return lambda: first is not None and first.spent


def _short(taken: Pools, files: Sequence[Any] | None, halves: bool) -> str:
    """``sampling.short_warning`` for the loader's windows when they spanned under ``sampling.MIN_SPAN_S`` in all
    (a small dataset read in one pass in a fraction of a second); its fix names the files a pass needs."""
    span_s = sum(taken.seconds)
    if not taken.rates or span_s >= sampling.MIN_SPAN_S:
        return ""
    pools = f"{len(taken.rates)} worker pool{'s' if len(taken.rates) != 1 else ''}"
    fix = ""
    if files is not None and taken.rate > 0:
        needed = sampling.files_for_span(taken.rate, 0.5 if halves else 1.0)
        read = -(-len(files) // 2) if halves else len(files)  # each phase reads half (``_measure``)
        fix = f"a pass over {needed:,} files or more would span 0.5 s (this check's pass is over {read:,})"
    return sampling.short_warning(f"the windows of {pools}", span_s, fix)


def _read_of(built: Loader, raw: Loader | None, files: int, failed: int) -> str:
    """"2 of the 768 files read, of 1,347; 674 decoded": how much of the dataset ``unreadable_samples`` counts over,
    where its pass read part of it; "" where it read them all."""
    decoded = built.first_pass.cursor if built.first_pass is not None else files
    read = decoded + (raw.first_pass.cursor if raw is not None and raw.first_pass is not None else 0)
    if read >= files:
        return ""
    return (f"{failed} of the {read:,} files read, of {files:,}" + (f"; {decoded:,} decoded" if raw is not None else "")
            + ": a file not read shows no fault (scan: all reads them)")


def _reads_no_files(options: Mapping[str, Any]) -> bool:
    """The loader reads the job's Dataset or DataLoader, or synthetic samples: no ``path`` to be mounted."""
    return bool(options.get("loader") or options["dataset"] or options["synthetic"])


def _no_sample_files(source: Source, tar: bool) -> str:
    """Why ``unreadable_samples`` does not apply: the loader reads no sample file of its own."""
    if tar:
        return "tar shards: a damaged shard or member is counted in the rows' note, not per sample file"
    if source.job is not None:
        return ("the job's Dataset reads its samples itself: one it cannot read raises in its worker, and the "
                "check's error names it")
    return "synthetic samples: no file is read"


def _left_in_pass(built: Loader) -> Callable[[], int | None]:
    """Samples of ``built``'s one pass not handed out yet (``PassSampler``); None for a stream or a loader whose
    sampler is the job's own."""
    first = built.first_pass
    return lambda: None if first is None else len(first)


def _epoch(source: Source, tar: bool) -> int | None:
    """Samples in one epoch of what the loader reads; None when unknown (samples inside tar shards, synthetic)."""
    if source.job is not None:
        return memory.epoch_of(source.job.dataset)
    return None if tar or source.files is None else len(source.files)


def _on_caveat(m: Measurement, caveat: str, memory: bool, path: str) -> Measurement:
    """Name what the filesystem does to the figure; on tmpfs/ramfs it is cache-bound."""
    if not m.measured:
        return m
    return dataclasses.replace(m, reason=caveat, cache_bound=memory or m.cache_bound,
                               hint=m.hint or _caveat_hint(caveat, path))


def _caveat_hint(caveat: str, path: str) -> str:
    return f"{path}: {caveat}; point dataloader.path at the dataset volume"


def _utilization(puller: BatchPuller, step_s: float, batch: int, workers: int, budget: Budget, method: str,
                 throughput: Measurement) -> Measurement:
    puller.step_time_s = step_s
    puller.restart_clock()  # its windows time the emulated steps from here, not on from the throughput's
    taken = windows(puller, max(1, workers), budget)
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
    return Measurement("accelerator_utilization", samples=tuple(w[2] for w in taken), unit="%",
                       method=f"{method}, emulated compute {step_s * 1e3:g} ms per batch (MLPerf Storage AU)",
                       stopped=taken.stopped, hint=hint)


def _decode_hint(raw_rate: float, decoded: float) -> str:
    if raw_rate >= 1.5 * decoded:
        return (f"decode-bound: raw reads deliver {format_value(raw_rate, 'samples/s')}, decoded only "
                f"{format_value(decoded, 'samples/s')}: add workers (CPUs allowing) or decode on the GPU (NVIDIA DALI)")
    return (f"storage-bound: raw reads alone deliver only {format_value(raw_rate, 'samples/s')}: use a faster "
            f"volume, a local NVMe cache, or shards (WebDataset, LMDB)")


def _per_gpu(given: float | Produced) -> float | str:
    """samples/s one GPU consumes: the option's quantity, or the producer's figure, or why that figure is missing."""
    if not isinstance(given, dict):
        return float(given)
    if "value" not in given:
        return (f"samples_per_gpu: {given['from']}.{given['metric']} is not available: "
                f"{given.get('reason') or 'the runner passed no figure'}")
    return float(given["value"])


def _required(options: Mapping[str, Any]) -> Required | str:
    """The samples/s the node's GPUs need (``samples_per_gpu`` x GPUs x headroom), or why it is not known."""
    per_gpu = _per_gpu(options["samples_per_gpu"])
    if isinstance(per_gpu, str):
        return per_gpu
    gpus = visible_gpus() if options["gpus"] == "auto" else int(options["gpus"])
    if gpus < 1:
        return "no CUDA device is visible to count GPUs: set dataloader.gpus to the number the job uses"
    given = options["samples_per_gpu"]
    source = given.get("source", "") if isinstance(given, dict) else ""
    return Required(per_gpu, gpus, float(options["headroom"]), source)


def _versus_required(options: Mapping[str, Any], throughput: Measurement) -> Measurement:
    required = _required(options)
    if isinstance(required, str):
        return unmeasurable("throughput_vs_required", required, "%")
    gpus = required.gpus
    share = tuple(100 * s / required.rate for s in throughput.samples)
    reason = f"{format_value(throughput.value, 'samples/s')} of {required.arithmetic()}"
    return Measurement("throughput_vs_required", 100 * float(throughput.value) / required.rate, "%",  # type: ignore[arg-type]
                       samples=share, floor=throughput.floor, method=throughput.method, reason=reason,
                       stopped=throughput.stopped, hint=f"this node can feed {float(throughput.value) / required.rate * gpus:.1f} "  # type: ignore[arg-type]
                       f"of its {gpus} GPUs at {required.arithmetic()}; {throughput.hint}")  # whole: throughput's
                                                                # own fix is printed only when it is judged and missed
