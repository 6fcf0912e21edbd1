"""The /dev/shm the job's DataLoader needs for its batches in flight, read against what the mount has free.

Loading layer (footprint); too small a tmpfs kills the job's workers (pytorch/pytorch#5040, #2244). Method::

    bytes     = one batch of the job's loader (num_workers 0, in a child process): distinct storages, page-rounded
    held      = storages the Dataset keeps (batches are views), moved there once per worker
                (torch/multiprocessing/reductions.py reduce_storage; StorageSharing.cpp THPStorage_shareFd)
    in flight = prefetch_factor x num_workers (+ 2 the training loop holds, without pin_memory)
                (torch/utils/data/dataloader.py _reset, _try_put_index; _next_data sends before __next__ returns)
    once      = spawn/forkserver: the Dataset's own tensors, moved there once as it is pickled
    needed    = bytes x in flight + held x num_workers + once + (3 x num_workers + 8) semaphore pages
    headroom  = (free - needed) / free                  free: statvfs f_bavail of /dev/shm

Where it does not fit, preflight starts no pool of its own (``Need.short``). docs/checks.md (``shm_needed``),
docs/benchmarks.md (shm_needed).
"""

from __future__ import annotations

import math
import time
import types
from typing import Any, Callable, Mapping, NamedTuple

from preflight.host import cgroup_memory
from preflight.host.fsinfo import filesystem_of
from preflight.measurement import Measurement, not_applicable, unmeasurable
from preflight.units import format_value

SHM_DIR = "/dev/shm"  # glibc's shm_open directory (sysdeps/unix/sysv/linux/shm-directory.h), where torch's segments go
PAGE = 4096  # tmpfs allocates whole pages
ROWS = ("shm_needed", "shm_headroom")


def storages(batch: Any) -> dict[int, tuple[int, Any]]:
    """``batch``'s distinct tensor storages: {key: (page-rounded bytes, the storage or None)}.

    Walks containers and objects' ``__dict__``; a view sends its whole storage; non-tensor leaves travel pickled and
    count 0; sparse and nested layouts count their elements' bytes.
    """
    import torch

    seen: dict[int, tuple[int, Any]] = {}
    walked: set[int] = set()  # containers and objects already walked: a Dataset may refer to itself
    stack = [batch]
    while stack:
        item = stack.pop()
        if not isinstance(item, (str, bytes, int, float, torch.Tensor)):
            if id(item) in walked:
                continue
            walked.add(id(item))
        if isinstance(item, torch.Tensor):
            try:
                storage = item.untyped_storage()
                key, nbytes = storage.data_ptr() or id(storage), storage.nbytes()
            except (RuntimeError, NotImplementedError):  # sparse or nested layouts: their elements' bytes
                storage, key, nbytes = None, id(item), item.element_size() * item.nelement()
            seen[key] = (-(-nbytes // PAGE) * PAGE, storage)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "__dict__") and not isinstance(item, (type, *_BY_REFERENCE)):
            stack.extend(vars(item).values())
    return seen


# Pickled by name, not by value: a Dataset's functions, methods and modules carry no tensor to a spawned worker.
_BY_REFERENCE = (types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def batch_bytes(batch: Any) -> int:
    """Bytes ``batch`` puts in shared memory when a worker sends it: its tensors' distinct storages, page-rounded
    (``storages``); a view of a larger storage counts the whole storage. numpy arrays, strings and numbers: 0."""
    return sum(nbytes for nbytes, _ in storages(batch).values())


def split_held(make: Callable[[], Any]) -> tuple[int, int]:
    """(bytes made for the batch ``make()`` returns, bytes of its storages that outlive it): a storage still alive
    once the batch is dropped (``StorageWeakRef``) is one the Dataset keeps, moved to shared memory once per worker.
    Nothing but ``make()``'s result may reference the batch."""
    from torch.multiprocessing.reductions import StorageWeakRef

    refs = [(nbytes, StorageWeakRef(storage) if storage is not None else None)
            for nbytes, storage in storages(make()).values()]
    held = sum(nbytes for nbytes, ref in refs if ref is not None and not ref.expired())
    return sum(nbytes for nbytes, _ in refs) - held, held


def semaphores(workers: int) -> int:
    """Bytes of the DataLoader's own semaphores in /dev/shm (multiprocessing's ``SemLock``, a page each): 3 per queue
    (one per worker and the result queue) and 5 for the done ``Event``; 0 without workers."""
    return (3 * workers + 8) * PAGE if workers > 0 else 0


def in_flight(workers: int, prefetch: int | None, pinned: bool) -> int:
    """Batches held in /dev/shm at once: ``prefetch x workers`` sent ahead (torch's
    ``_MultiProcessingDataLoaderIter``), + 2 the training loop holds unless pinning copied them out; 0 without
    workers."""
    if workers <= 0:
        return 0
    return int(prefetch or 2) * workers + (0 if pinned else 2)


def shm_size(nbytes: int) -> tuple[str, str]:
    """The size to set for ``nbytes``, rounded up: (``docker run --shm-size``, Kubernetes ``sizeLimit``); a power of
    two MiB below 1 GiB, whole GiB above."""
    mib = max(64, nbytes / (1 << 20))
    if mib <= 512:
        up = 1 << math.ceil(math.log2(mib - 1e-9))
        return f"{up}m", f"{up}Mi"
    gib = math.ceil(mib / 1024 - 1e-9)
    return f"{gib}g", f"{gib}Gi"


class Need(NamedTuple):
    """One batch's shared-memory bytes, the batches the job's loader holds at once, and the mount's free space."""

    batch: int  # bytes of one full batch in shared memory
    batch_size: int  # samples per batch (the job's)
    workers: int
    prefetch: int | None
    pinned: bool  # pin_memory on a node with CUDA: the loop's batch is pinned, not in /dev/shm
    free: int  # bytes free on /dev/shm (statvfs f_bavail)
    size: int  # bytes of the mount
    where: str  # the mount, for the method ("/dev/shm (tmpfs)")
    memory_limit: int | None = None  # the cgroup's memory limit (``cgroup_memory.memory_limit``); None: none read
    held: int = 0  # bytes of the storages the Dataset keeps (``split_held``): moved there once by each forked worker
    once: int = 0  # bytes of the Dataset's tensors, moved there once as it is pickled to spawned workers
    cpu_share: float | None = None  # of the probe batch's loading time, the share spent on a CPU (the rest waited)

    @property
    def batches(self) -> int:
        return in_flight(self.workers, self.prefetch, self.pinned)

    def fixed(self, workers: int) -> int:
        """What ``workers`` workers hold in /dev/shm whatever the batch: kept storages and semaphores."""
        return self.held * max(0, workers) + (self.once if workers > 0 else 0) + semaphores(workers)

    @property
    def needed(self) -> int:
        return self.batch * self.batches + self.fixed(self.workers)

    @property
    def short(self) -> bool:
        """The job's loader would run out of /dev/shm: its workers die with a bus error or ENOSPC."""
        return self.needed > self.free

    def fits(self, workers: int) -> bool:
        """Whether ``workers`` workers' batches in flight fit what /dev/shm has free (the worker sweep's counts)."""
        return self.batch * in_flight(workers, self.prefetch, self.pinned) + self.fixed(workers) <= self.free

    def arithmetic(self) -> str:
        """The sum in words: ``10 batches of 36.75 MiB (64 samples): num_workers 4 x prefetch_factor 2 + 2 the
        training loop holds ...``."""
        loop = "" if self.pinned else " + 2 the training loop holds (its batch and the one before it)"
        kept = (f", {_size(self.held)} of tensors the Dataset keeps (its batches are views of them) x "
                f"num_workers {self.workers}" if self.held else "")
        if self.once:
            kept += (f", {_size(self.once)} of the Dataset's tensors, moved there once as the Dataset is pickled to "
                     f"the workers (spawn, forkserver)")
        return (f"{self.batches} batches of {_size(self.batch)} ({self.batch_size} samples): num_workers "
                f"{self.workers} x prefetch_factor {self.prefetch}{loop}{kept}, and "
                f"{_size(semaphores(self.workers))} of the loader's semaphores")

    def largest_batch(self) -> int:
        """The largest batch_size whose batches in flight fit what is free; 0 when not even one sample's do."""
        per_sample = self.batch / max(1, self.batch_size)
        room = max(0, self.free - self.fixed(self.workers))
        return int(room // (per_sample * max(1, self.batches))) if per_sample else self.batch_size

    def fix(self) -> str:
        """The size to set (what others hold on the mount kept), and what would fit instead: the largest batch_size,
        the most workers, the largest prefetch_factor."""
        docker, kubernetes = shm_size(self.needed + max(0, self.size - self.free))
        instead = []
        if 0 < self.largest_batch() < self.batch_size:
            instead.append(f"batch_size to {self.largest_batch()}")
        most = max(n for n in range(self.workers) if self.fits(n))  # 0 always fits: nothing in flight
        instead.append(f"num_workers to {most}" + (" (the main process loads: nothing passes through /dev/shm, "
                                                   "nothing loads in parallel)" if not most else ""))
        room = max(0, self.free - self.fixed(self.workers))
        spare = room // self.batch - (0 if self.pinned else 2) if self.batch else 0
        prefetch = min(int(self.prefetch or 2) - 1, spare // max(1, self.workers))
        if prefetch >= 1:
            instead.append(f"prefetch_factor to {prefetch}")
        return (f"start the container with --shm-size={docker}, or in Kubernetes mount an emptyDir with medium: "
                f"Memory and sizeLimit: {kubernetes} at {SHM_DIR} (it counts against the pod's memory limit); or "
                f"lower {', '.join(instead[:-1]) + ' or ' + instead[-1] if len(instead) > 1 else instead[0]}")

    def why_not_started(self, fix: bool = False) -> str:
        """The reason the loader's other rows carry when its pools were not started (``short``); with ``fix``, the
        size to set too (a check without the shm rows: the pipeline)."""
        return (f"not measured: the loader's batches in flight need {_size(self.needed)} of {SHM_DIR} "
                f"({self.arithmetic()}), which has {_size(self.free)} free; its workers would die with a bus error, "
                f"as the job's would, so no worker was started: "
                + (self.fix() if fix else "dataloader.shm_headroom says the size to set"))

    def rows(self, method: str) -> list[Measurement]:
        """``shm_needed`` (B) and ``shm_headroom`` (%), with the arithmetic and, where it does not fit, the fix."""
        how = (f"one batch loaded as num_workers 0 loads it (in a child process) before any worker started: "
               f"{_size(self.batch)} of tensor storages (as torch's workers put them in shared memory), x "
               f"{self.arithmetic()} "
               f"(torch's _MultiProcessingDataLoaderIter keeps prefetch_factor x num_workers batches outstanding); "
               f"statvfs of {self.where}; {method}")
        if not self.workers:
            how = f"num_workers 0: the main process loads every batch, none passes through {SHM_DIR}; {method}"
        free = f"{_size(self.free)} free of {_size(self.size)} on {SHM_DIR}"
        if self.memory_limit is not None and self.memory_limit < self.free:
            # A memory emptyDir shows half the node's RAM, charged to the pod's limit (kubernetes/kubernetes#76263).
            free += (f"; the cgroup memory limit, {_size(self.memory_limit)}, is below that: the segments' pages "
                     f"count against it, so memory_headroom judges the rest")
        hint = ""
        if self.short:
            hint = (f"batch_size {self.batch_size} needs {_size(self.needed)} of {SHM_DIR} in flight "
                    f"({self.arithmetic()}) and {_size(self.free)} is free: the job's workers die with a bus error "
                    f"(or \"unable to write to file </torch_...>\"): {self.fix()}")
        headroom = 100.0 * (self.free - self.needed) / self.free if self.free else (100.0 if not self.needed
                                                                                      else -100.0)
        return [Measurement("shm_needed", float(self.needed), "B", method=how, note=free, hint=hint),
                Measurement("shm_headroom", headroom, "%", method=how,
                            reason=f"{_size(self.needed)} needed, {free}", hint=hint)]


def need(options: Mapping[str, Any], source: Any, built: Any) -> Need | list[Measurement]:
    """The ``Need`` of the loader ``built`` over ``source``, or the two rows saying why there is none.

    Loads one batch in this process (``first_batch``) where the loader has workers. Raises what the job's code
    raises while loading it (``source.opened`` re-words it)."""
    if source.files is not None:  # preflight's file loader: batches of (count, bytes), not the samples' data
        why = ("the files loader's batches hold sample counts, not the samples' data, so they say nothing of the "
               "job's: name the job's Dataset (dataset:) or DataLoader (loader:), or synthetic: true, to measure "
               "the /dev/shm its batches need")
        return [not_applicable(name, why, unit) for name, unit in zip(ROWS, ("B", "%"))]
    try:
        fs = filesystem_of(SHM_DIR)
    except OSError as error:
        why = (f"{SHM_DIR}: {error.strerror}: the job's workers cannot create their shared memory there: mount a "
               f"tmpfs at {SHM_DIR}")
        return [unmeasurable(name, why, unit) for name, unit in zip(ROWS, ("B", "%"))]
    batch_size = int(built.batch_size or 1)
    workers, prefetch = built.workers, built.prefetch_factor
    nbytes = held = once = 0
    cpu_share = None
    if workers:
        pickled, tensors = pickled_tensors(built)
        once = tensors if pickled else 0
        if once <= fs.free_bytes:  # else the probe's start would fill /dev/shm as the job's workers' start does
            nbytes, held, samples, cpu_share = first_batch(built)
            if samples and samples < batch_size:  # a dataset shorter than one batch: scaled to a full one
                nbytes = int(nbytes * batch_size / samples)
            if pickled:  # the storages it keeps are the ones shared once, already in `once`
                held = 0
    return Need(nbytes, batch_size, workers, prefetch, pinned(options, source), fs.free_bytes, fs.size_bytes,
                fs.describe(), cgroup_memory.memory_limit(), held, once, cpu_share)


def pickled_tensors(built: Any) -> tuple[bool, int]:
    """(whether ``built``'s workers get a pickled copy of its Dataset, the bytes of its tensor storages).

    Under spawn and forkserver (Python 3.14's default) torch's ``reduce_storage`` moves each storage to /dev/shm once
    as the Dataset is pickled (ultralytics/ultralytics#26086); under fork nothing is. The Dataset is walked, not
    pickled; the loader is made (``Loader.fresh``), never iterated.
    """
    import torch.multiprocessing

    loader = built.fresh().dataloader
    context = loader.multiprocessing_context
    # The start method set, else this Python's default, read without fixing it (as get_start_method() would).
    method = (context.get_start_method() if context is not None else
              torch.multiprocessing.get_start_method(allow_none=True)
              or torch.multiprocessing.get_all_start_methods()[0])
    if method == "fork":
        return False, 0
    return True, sum(nbytes for nbytes, _ in storages(loader.dataset).values())


# What torch says when a worker runs out of /dev/shm: a SIGBUS past the mount's end, or the worker's ENOSPC.
SIGNS = ("Bus error", "out of shared memory", "unable to allocate shared memory", "unable to write to file </torch_",
         "unable to open shared memory")


def died_of(error: BaseException) -> str | None:
    """The reason, with the fix, when ``error`` is a DataLoader worker's death for want of /dev/shm; else None (a
    later batch larger than the first, or another process filling the mount)."""
    text = str(error)
    if not any(sign in text for sign in SIGNS):
        return None
    said = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), text)
    try:
        fs = filesystem_of(SHM_DIR)
        now = f"; {_size(fs.free_bytes)} free of {_size(fs.size_bytes)} there now"
    except OSError:
        now = ""
    return (f"a DataLoader worker died for want of {SHM_DIR} ({said[:200]}){now}: a batch larger than the first "
            f"(samples of varying size), or another process filling the mount, needs more than shm_needed "
            f"projected: raise /dev/shm (docker run --shm-size, a Kubernetes emptyDir with medium: Memory and a "
            f"sizeLimit) or lower batch_size, num_workers or prefetch_factor")


def denied(error: BaseException) -> str | None:
    """The reason, with the fix, when ``error`` is the loader refused /dev/shm by its mode (torch's queues create
    their semaphores there, sem_open(3), as the job's user); else None."""
    import os
    import stat

    if not isinstance(error, PermissionError) or os.access(SHM_DIR, os.W_OK):
        return None
    info = os.stat(SHM_DIR)
    return (f"the DataLoader's workers cannot start as uid {os.geteuid()}: {SHM_DIR} is mode "
            f"{stat.S_IMODE(info.st_mode):04o} (owner uid {info.st_uid}), so the queues that carry its batches cannot "
            f"create their semaphores there ({error}): mount it with mode=1777 (docker run --tmpfs "
            f"/dev/shm:rw,mode=1777; Kubernetes' emptyDir medium: Memory is 1777), or chmod 1777 {SHM_DIR}")


def pinned(options: Mapping[str, Any], source: Any) -> bool:
    """Whether the job's loader pins its batches here: ``pin_memory`` (its own DataLoader's) and a CUDA device."""
    import torch

    loader = source.job.loader if source.job is not None else None
    wanted = loader.pin_memory if loader is not None else options.get("pin_memory", True)
    return bool(wanted) and torch.cuda.is_available()


def first_batch(built: Any) -> tuple[int, int, int | None, float | None]:
    """(bytes made for the batch, bytes of storages the Dataset keeps, samples, the share of its loading time spent
    on a CPU, the rest waiting) of one batch of ``built``'s loader,
    loaded as ``num_workers=0`` loads it (``split_held``) in a child started as the job's workers are (a handle the
    Dataset opens lazily stays unopened for them). Its indices are drawn from the run's pass.

    Raises:
        RuntimeError: the child died before it answered (its exit code named), or what the job's code raised.
    """
    import torch.multiprocessing
    import torch.utils.data

    loader = built.fresh().dataloader
    batched = loader.batch_sampler is not None  # torch's _auto_collation
    indices = None
    if not isinstance(loader.dataset, torch.utils.data.IterableDataset):
        drawn = next(iter(loader.batch_sampler if batched else loader.sampler), None)
        if drawn is None:
            return 0, 0, 0, None
        indices = list(drawn) if batched else [drawn]
    context = loader.multiprocessing_context or torch.multiprocessing
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_load, args=(loader.dataset, loader.collate_fn, indices, batched,
                                                loader.batch_size, send), daemon=True)
    child.start()
    send.close()
    try:
        answer = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the process loading one batch to measure its shared memory died (exit code "
                           f"{child.exitcode})") from None
    finally:
        receive.close()
    child.join()
    if answer[0] == "raised":
        answer[1].reraise()
    return answer[1], answer[2], answer[3], answer[4]


def _load(dataset: Any, collate: Any, indices: list[Any] | None, batched: bool, batch_size: int | None,
          answer: Any) -> None:
    """In the child: fetch and collate one batch as torch's fetchers do; send the sizes or the exception. One intra-op
    thread, as torch's ``_worker_loop``: a forked child's inherited OpenMP pool can hang its first op."""
    import itertools

    import torch
    from torch.utils.data._utils import ExceptionWrapper

    torch.set_num_threads(1)
    try:
        wall, (cpu, queued) = time.perf_counter(), _on_cpu()
        if indices is not None:
            data = [dataset[i] for i in indices] if batched else dataset[indices[0]]
        else:
            stream = iter(dataset)
            data = list(itertools.islice(stream, batch_size)) if batched else next(stream)
        ran, waited = _on_cpu()
        wall, cpu = time.perf_counter() - wall - (waited - queued), ran - cpu  # a wait for a busy CPU is not I/O
        samples = len(data) if batched else None
        box = [data]  # the samples, let go in collate: a storage alive after the batch is then one the Dataset keeps
        del data
        answer.send(("measured", *split_held(lambda: collate(box.pop()) if box[0] is not None else None), samples,
                     min(1.0, cpu / wall) if wall > 0 else None))
    except BaseException:  # noqa: BLE001  the job's exception, sent back whole
        answer.send(("raised", ExceptionWrapper(where="in the process loading one batch (num_workers 0)")))
    finally:
        answer.close()


def _on_cpu() -> tuple[float, float]:
    """(seconds this thread ran on a CPU, seconds it waited runnable for one) from /proc/thread-self/schedstat
    (the kernel's sched-stats.rst); (process CPU time, 0) where it cannot be read. A loader starved of CPU by other
    load waits in the run queue, which is not the waiting on I/O that more workers than CPUs would overlap."""
    try:
        with open("/proc/thread-self/schedstat") as handle:
            ran, waited = handle.read().split()[:2]
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return time.process_time(), 0.0


def _size(nbytes: float) -> str:
    return format_value(float(nbytes), "B")
