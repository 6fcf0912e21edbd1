"""The DataLoader's host memory: the main process and every worker by PSS, projected to an epoch against the limit.

Loading layer (footprint). PSS from ``/proc/PID/smaps_rollup`` after each window (pytorch/pytorch#159432's method);
forked workers copy the Dataset's pages as reference counts dirty them (pytorch/pytorch#13246, #5902, #20433)::

    copies(s)  = workers x per_worker x (1 - (1 - s / (workers x epoch))^k)     s: samples delivered
    fit        = per_worker (at most ``user.Job.footprint``), k by least squares on the workers' Private_Dirty
    tmpfs      = cgroup shmem growth - Pss_Shmem (moby/moby#47967, argonne-lcf/dlio_benchmark#165), at most the
                 loader's wchar where the cgroup holds other programs (herdrdev/herdr#2178)
    projected  = peak (Pss + tmpfs) + copies(epoch) - copies(at the peak) + tmpfs growth x samples left

Unseen slowing projects the bound; the limit is the tighter of the cgroup's and MemAvailable plus what the loader
holds. docs/checks.md (``memory_peak``), docs/benchmarks.md (dataloader_memory).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from preflight.loading.footprint.cow import Saturation, fit
from preflight.loading.loop import BatchPuller, Window
from preflight.host import cgroup_memory, hostmem
from preflight.host import pids as pids_limit
from preflight.measurement import Measurement, unmeasurable
from preflight.units import format_value

PROC = Path("/proc")
# Growth below this share of the peak is not blamed on copy-on-write (numpy-backed workers grew 5%: arenas).
BLAMED_GROWTH = 0.10
# A reading (smaps_rollup of every process) costs ~3 ms of CPU a process, taken from the workers on a busy node:
# a reading waits until this many times its own cost has passed since the last, so it takes at most 5% of a CPU.
READ_DUTY = 20


class Rollup(NamedTuple):
    """One process's memory from its smaps_rollup, in bytes."""

    pss: int  # proportional set size: shared pages divided among their sharers
    pss_anon: int  # the anonymous part of pss (Linux 5.10+; the whole pss on older kernels)
    anonymous: int  # anonymous pages mapped, shared or not: what a forked child could copy
    private_dirty: int  # pages this process alone holds, written: a worker's copies and its own allocations
    pss_shmem: int = 0  # the shared-memory (tmpfs, /dev/shm) part of pss: batches in flight (Linux 5.10+)


def rollup(pid: int, proc: Path = PROC) -> Rollup | None:
    """``/proc/PID/smaps_rollup`` of ``pid`` in bytes; None when the process is gone or the kernel lacks the file."""
    try:
        text = (proc / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "kB":
            fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    if "Pss" not in fields:
        return None
    return Rollup(fields["Pss"], fields.get("Pss_Anon", fields["Pss"]), fields.get("Anonymous", 0),
                  fields.get("Private_Dirty", 0), fields.get("Pss_Shmem", 0))


class Reading(NamedTuple):
    """The loader's memory after a window: samples delivered so far by this pool, the main process and each worker."""

    delivered: int
    main: Rollup
    workers: tuple[Rollup, ...]
    tmpfs: int = 0  # bytes on tmpfs charged to the cgroup since the pool started that none of these processes maps
    tasks: int = 0  # threads of the main process and of every worker (/proc/PID/task): what the pids limit counts
    main_tasks: int = 0  # of ``tasks``, the main process's

    @property
    def pss(self) -> int:
        return self.main.pss + sum(w.pss for w in self.workers)

    @property
    def held(self) -> int:
        """What the loader holds against the limit: its PSS and the files on tmpfs it left unmapped."""
        return self.pss + self.tmpfs

    @property
    def anon(self) -> int:
        return self.main.pss_anon + sum(w.pss_anon for w in self.workers)

    @property
    def copyable(self) -> int:
        """What the workers could still copy: each worker at most the main process's anonymous memory."""
        return sum(max(0, self.main.anonymous - w.private_dirty) for w in self.workers)


def written(pid: int, proc: Path = PROC) -> int | None:
    """Bytes ``pid`` has passed to write() and its kin since it started (``wchar`` of ``/proc/PID/io``: files, pipes
    and sockets alike); None when the process is gone or the file unreadable."""
    try:
        text = (proc / str(pid) / "io").read_text()
    except OSError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return int(fields["wchar"]) if fields.get("wchar", "").strip().isdigit() else None


def _written_since(main_pid: int, workers: Sequence[int], main_before: int | None, proc: Path) -> int | None:
    """Bytes the main process wrote since ``main_before`` and the workers since they started; None when any of them is
    unreadable."""
    if main_before is None:
        return None  # no cap asked (the cgroup holds the loader alone): the processes' files are not read
    main = written(main_pid, proc)
    each = [written(pid, proc) for pid in workers]
    if main is None or None in each:
        return None
    return main - main_before + sum(each)  # type: ignore[arg-type]


def read(iterator: Any, delivered: int, main_pid: int, proc: Path = PROC, shmem_before: int | None = None,
         shmem_now: int | None = None, written_before: int | None = None) -> Reading | None:
    """The memory of ``main_pid`` and of the workers of a DataLoader ``iterator`` (torch's ``_workers``); None when
    unreadable.

    ``shmem_before``/``shmem_now``: the cgroup's tmpfs bytes before the pool started and now; their growth less the
    mapped shared memory is files on tmpfs, capped by what the loader wrote since ``written_before`` (None: the cgroup
    holds the loader alone).
    """
    main = rollup(main_pid, proc)
    if main is None:
        return None
    pids = [p.pid for p in getattr(iterator, "_workers", ()) if p.pid is not None]
    workers = tuple(w for w in (rollup(pid, proc) for pid in pids) if w is not None)
    main_tasks = pids_limit.tasks_of(main_pid, proc)
    tasks = main_tasks + sum(pids_limit.tasks_of(pid, proc) for pid in pids)
    tmpfs = 0
    if shmem_before is not None and shmem_now is not None:
        tmpfs = max(0, shmem_now - shmem_before - main.pss_shmem - sum(w.pss_shmem for w in workers))
        wrote = _written_since(main_pid, pids, written_before, proc)
        tmpfs = tmpfs if wrote is None else min(tmpfs, wrote)
    return Reading(delivered, main, workers, tmpfs, tasks, main_tasks)


class Watched(BatchPuller):
    """A ``BatchPuller`` that counts the samples it delivers and reads the loader's memory after each window."""

    def __init__(self, *args: Any, main_pid: int, **kwargs: Any) -> None:
        self.shmem_before = cgroup_memory.shmem()  # before the workers start and write anything
        self.written_before = written(main_pid)
        self.shared = bool(cgroup_memory.shared_with_others(main_pid))  # another program's tmpfs files count too
        super().__init__(*args, **kwargs)
        self.main_pid = main_pid
        self.delivered = 0
        self.readings: list[Reading] = []
        self.early: Reading | None = None
        self.watching = True
        self.next_read = 0.0  # time.perf_counter() before which a reading waits (``READ_DUTY``)

    def _next(self) -> tuple[int, int]:
        samples, nbytes = super()._next()
        self.delivered += samples
        if self.watching and not self.readings and not self.batches & (self.batches - 1) and self._due():
            self.early = self._read()  # batches 1, 2, 4, 8...: a pass that ends inside the warm-up is read too
        return samples, nbytes

    def _due(self) -> bool:
        """Whether a reading now keeps the readings within ``READ_DUTY``'s share of the CPU."""
        return time.perf_counter() >= self.next_read

    def _read(self) -> Reading | None:
        began = time.perf_counter()
        self.shared = self.shared or bool(cgroup_memory.shared_with_others(self.main_pid))
        reading = read(self.iterator, self.delivered, self.main_pid, shmem_before=self.shmem_before,
                       shmem_now=cgroup_memory.shmem(), written_before=self.written_before if self.shared else None)
        ended = time.perf_counter()
        self.next_read = ended + READ_DUTY * (ended - began)
        return reading

    def ended_early(self) -> None:
        """The pass ended before any window was read: the last reading taken on the way (batches 1, 2, 4, 8...) stands
        for the pool, so a small dataset still gets its memory and pids rows."""
        if self.watching and not self.readings and self.early is not None:
            self.readings.append(self.early)

    def window(self, seconds: float) -> Window:
        taken = super().window(seconds)
        if self.spent:  # the pass ended inside the first window (a small dataset): as in the warm-up, the last reading
            self.ended_early()  # stands; at the pass's end torch is already shutting its workers down
        elif self.watching and (len(self.readings) < 2 or self._due()):  # two: the growth between them (``project``)
            reading = self._read()
            if reading is not None:
                self.readings.append(reading)
        return taken


class Watch:
    """The readings of every worker pool started through ``puller``, kept without keeping the pools alive."""

    def __init__(self) -> None:
        self.pools: list[list[Reading]] = []
        self.last: Watched | None = None
        self.projection: Projection | None = None
        self.limit: Limit | None = None
        self.persistent = False  # the loader keeps its workers from one epoch to the next (persistent_workers)

    def puller(self, loader: Any, count: Any) -> Watched:
        """A ``Watched`` puller over ``loader`` (a fresh pool), its readings recorded here."""
        self.persistent = bool(getattr(loader, "persistent_workers", False))
        self.last = Watched(loader, count=count, main_pid=os.getpid())
        self.pools.append(self.last.readings)
        return self.last

    def stop(self) -> None:
        """Read no later window of the last pool: a reading between the utilization phase's windows would be idle time
        its steps never had."""
        if self.last is not None:
            self.last.watching = False

    def measurements(self, epoch: int | None, workers: int, prefetch: Any, method: str,
                     footprint: int | None = None) -> list[Measurement]:
        """The rows of the pools watched so far; later windows (the utilization phase) are not read. ``footprint``:
        bytes building the dataset took here, the most a worker can copy (None: the main process's anonymous memory)."""
        self.stop()
        self.last = None  # the pool is not kept alive here
        self.projection = project(self.pools, epoch, footprint, self.persistent)
        self.limit = limit(self.projection.peak) if self.projection is not None else None
        return measurements(self.projection, workers, prefetch, method, self.limit)

    def tasks(self) -> list[tuple[int, int]]:
        """(the main process's tasks, its workers' tasks) read after each window of every pool."""
        return [(r.main_tasks, r.tasks - r.main_tasks) for readings in self.pools for r in readings]

    def fits(self, workers: int) -> bool | None:
        """Whether ``workers`` workers' projected epoch fits the limit (``Projection.at``); None when unknown. Call
        after ``measurements``."""
        if self.projection is None or self.limit is None or not self.projection.workers:
            return None
        return self.projection.at(workers) <= self.limit.bytes


def epoch_of(dataset: Any) -> int | None:
    """Samples in one epoch: ``len(dataset)``; None for a dataset without one (an IterableDataset may have none)."""
    try:
        return len(dataset)
    except TypeError:
        return None


class Projection(NamedTuple):
    """The loader's memory measured over the pools' windows and projected to one epoch."""

    peak: int  # bytes: the largest sum of PSS and unmapped tmpfs read (``Reading.held``)
    pool_peaks: tuple[int, ...]  # bytes: each pool's largest
    growth: float  # bytes of anonymous memory per sample delivered (median over the intervals, >= 0)
    delivered: int  # samples the peak's pool had delivered at the peak's reading
    epoch: int | None  # samples in one epoch (len(dataset)); None: no epoch (synthetic samples, no __len__)
    copyable: int  # bytes the workers could still copy, at the peak's reading
    workers_grew: bool  # the workers' anonymous memory grew more than the main process's: copy-on-write
    main: int = 0  # bytes: the main process's PSS at the peak's reading
    workers: int = 0  # workers read at the peak's reading
    tmpfs: int = 0  # bytes: files on tmpfs in the peak (``Reading.tmpfs``)
    tmpfs_growth: float = 0.0  # bytes of them per sample delivered (median over the intervals, >= 0)
    cow: Saturation | None = None  # the copy-on-write growth fitted on the windows; None: a straight line
    persistent: bool = False  # the workers live on from epoch to epoch (persistent_workers): their copies add up

    @property
    def left(self) -> int:
        """Samples left in the epoch after the peak's reading."""
        return 0 if self.epoch is None else max(0, self.epoch - self.delivered)

    @property
    def tmpfs_added(self) -> int:
        """Bytes the rest of the epoch writes to tmpfs: no copy-on-write bound, every sample may write its own."""
        return int(self.tmpfs_growth * self.left)

    @property
    def added(self) -> int:
        """Bytes the rest of the epoch adds to the peak: the workers' copies still to come (``Saturation``), or,
        without workers or an epoch, the growth per sample over the samples left, at most ``copyable``."""
        if self.cow is not None and self.epoch:
            # Persistent workers keep their copies, so each ends up holding every page (pytorch/pytorch#62066).
            end = self.epoch * (self.cow.workers if self.persistent else 1)
            grown = self.cow.copied(end, self.epoch) - self.cow.copied(self.delivered, self.epoch)
            return int(max(0.0, grown)) + self.tmpfs_added
        return int(min(self.growth * self.left, self.copyable)) + self.tmpfs_added

    @property
    def projected(self) -> int:
        return self.peak + self.added

    def at(self, workers: int) -> int:
        """Bytes projected with ``workers`` workers instead: the main process's and tmpfs files fixed, each worker's
        share of the rest."""
        if not self.workers:
            return self.projected
        fixed = self.main + self.tmpfs + self.tmpfs_added
        return int(fixed + (self.projected - fixed) * workers / self.workers)


def project(pools: Sequence[Sequence[Reading]], epoch: int | None, footprint: int | None = None,
            persistent: bool = False) -> Projection | None:
    """The ``Projection`` of each pool's readings (in order); None when no pool has a reading.

    With workers and an epoch the copies to come are the fitted ``Saturation``, each worker copying at most
    ``footprint`` (at least what one was seen to copy) or else the main process's anonymous memory; otherwise the
    median growth per sample, at most ``copyable``. ``persistent``: every worker ends up holding every page.
    """
    pools = [p for p in pools if p]
    if not pools:
        return None
    slopes, tmpfs_slopes, worker_growth, main_growth = [], [], 0, 0
    for readings in pools:
        intervals = list(zip(readings, readings[1:]))
        # The first interval is left out where later ones follow: the main process settles there, once.
        for first, last in intervals[1:] or intervals:
            if last.delivered > first.delivered:
                slopes.append(max(0.0, (last.anon - first.anon) / (last.delivered - first.delivered)))
                tmpfs_slopes.append(max(0.0, (last.tmpfs - first.tmpfs) / (last.delivered - first.delivered)))
        first, last = readings[0], readings[-1]
        main_growth += last.main.pss_anon - first.main.pss_anon
        worker_growth += sum(w.pss_anon for w in last.workers) - sum(w.pss_anon for w in first.workers)
    peaks = tuple(max(r.held for r in readings) for readings in pools)
    at_peak = max((r for readings in pools for r in readings), key=lambda r: r.held)
    growth = statistics.median(slopes) if slopes else 0.0
    cow = None
    if at_peak.workers and epoch and growth > 0:
        bound = min(p[0].main.anonymous for p in pools)
        of = "the main process's anonymous memory"
        if footprint is not None:
            seen = max((w.private_dirty - w0.private_dirty for p in pools for w0, w in zip(p[0].workers, p[-1].workers)),
                       default=0)
            if max(footprint, seen) < bound:
                bound, of = max(footprint, seen), "what building the dataset took in the main process"
        cow = fit(pools, epoch, len(at_peak.workers), bound)
        cow = cow._replace(bound_of=of) if cow is not None else None
    return Projection(max(peaks), peaks, growth, at_peak.delivered,
                      epoch, at_peak.copyable, worker_growth > max(0, main_growth), at_peak.main.pss,
                      len(at_peak.workers), at_peak.tmpfs, statistics.median(tmpfs_slopes) if tmpfs_slopes else 0.0,
                      cow, persistent)


class Limit(NamedTuple):
    bytes: int
    what: str  # where it comes from, for the message: "the cgroup memory limit", ...


def limit(holding: int) -> Limit | None:
    """The memory the job may use: the tighter of the cgroup's limit and MemAvailable plus ``holding`` (bytes the
    loader already holds). A cgroup limit above what the host has binds nothing (Traitome/oxo-flow#96); a v2
    ``memory.high`` below it is where the kernel throttles (sqliteai/warp#14)."""
    cgroup, high = cgroup_memory.memory_limit(), cgroup_memory.memory_high()
    available = hostmem.mem_available()
    host = None if available is None else available + holding
    if high is not None and (cgroup is None or high < cgroup) and (host is None or high <= host):
        return Limit(high, "the cgroup's memory.high, above which the kernel throttles the loader"
                     + (f"; its memory limit is {cgroup_memory.readable(cgroup)}" if cgroup is not None else ""))
    if cgroup is not None and (host is None or cgroup <= host):
        return Limit(cgroup, "the cgroup memory limit")
    if host is None:
        return None
    above = (f"below the cgroup memory limit of {cgroup_memory.readable(cgroup)}" if cgroup is not None
             else "no cgroup memory limit")
    return Limit(host, f"the host's available memory and what the loader holds; {above}")


def _copies(projection: Projection) -> str:
    """What the message says of the workers' copies to come: the fitted saturation, or the bound and why."""
    size, cow = cgroup_memory.readable, projection.cow
    if cow is None:
        if projection.epoch and projection.growth * projection.epoch > projection.copyable:
            return (f", at most {size(projection.copyable)} more as every worker copies all the main process's "
                    f"anonymous memory")
        return ""
    to_come = size(projection.added - projection.tmpfs_added)
    by = ("once each has read every record (persistent_workers keeps the copies from one epoch to the next)"
          if projection.persistent else "by the epoch's end")
    if cow.fitted:
        return (f"; copy-on-write fitted on the windows: each worker copies {size(int(cow.per_worker))} once it "
                f"has read a record on each page ({cow.k:.0f} records a page), {to_come} more {by}")
    return (f"; the workers' growth not seen slowing in these windows: each copies at most "
            f"{size(int(cow.per_worker))} of {size(int(cow.bound))}, {cow.bound_of}, {to_come} more {by}")


def measurements(projection: Projection | None, workers: int, prefetch: Any, method: str,
                 the_limit: Limit | None = None) -> list[Measurement]:
    """``memory_peak`` and ``memory_headroom`` from ``projection``; ``the_limit`` defaults to ``limit(peak)``."""
    if projection is None:
        why = "no /proc/PID/smaps_rollup could be read (Linux 4.14+ with /proc mounted)"
        return [unmeasurable("memory_peak", why, "B"), unmeasurable("memory_headroom", why, "%")]
    method = (f"{method}, PSS from /proc/PID/smaps_rollup of the main process and {workers} workers after each window"
              f", and the files on tmpfs they leave unmapped (the cgroup's memory.stat shmem)")
    peak = Measurement("memory_peak", float(projection.peak), "B", samples=projection.pool_peaks, method=method)
    the_limit = the_limit or limit(projection.peak)
    if the_limit is None:
        return [peak, unmeasurable("memory_headroom", "no cgroup memory limit and no MemAvailable in /proc/meminfo "
                                   "to compare the loader's memory with", "%")]
    size = cgroup_memory.readable
    on_tmpfs = projection.tmpfs + projection.tmpfs_added >= BLAMED_GROWTH * projection.peak
    if projection.epoch is None:
        over = "no epoch to project (synthetic samples or no __len__): the measured peak"
    else:
        over = (f"{size(projection.projected)} projected over "
                f"{'the epochs' if projection.persistent else 'one epoch'} of {projection.epoch:,} samples at "
                f"num_workers {workers}, prefetch_factor {prefetch} ({size(projection.peak)} measured after "
                f"{projection.delivered:,} samples, +{format_value(projection.growth, 'B')} per sample"
                + _copies(projection)
                + (f"; {size(projection.tmpfs)} of it files on tmpfs, +{format_value(projection.tmpfs_growth, 'B')} "
                   f"per sample" if on_tmpfs else "") + ")")
    headroom = 100.0 * (the_limit.bytes - projection.projected) / the_limit.bytes
    if headroom < 0 and projection.cow is not None and not projection.cow.fitted and projection.added > 0:
        hint_more = ("; these windows read too few samples to see the copies slow, so the projection is an upper "
                     "bound: a longer duration reads more and tightens it")
    else:
        hint_more = ""
    reason = f"{over}, against {size(the_limit.bytes)} ({the_limit.what})"
    hint = ""
    if projection.tmpfs_added >= max(BLAMED_GROWTH * projection.peak, projection.added / 2):
        hint = (f"the loader leaves files on tmpfs (/dev/shm, a memory-backed emptyDir), "
                f"+{format_value(projection.tmpfs_growth, 'B')} per sample: they count against the cgroup's memory "
                f"limit though no process maps them (moby/moby#47967): cache on disk instead, delete what an epoch "
                f"no longer needs, or raise the pod's memory limit by what one epoch writes")
    elif projection.added >= BLAMED_GROWTH * projection.peak and projection.workers_grew:
        hint = (f"each worker copies the Dataset's pages as it reads them (copy-on-write: Python objects' reference "
                f"counts dirty every page touched, so memory grows with workers and samples read, not batch size; "
                f"pytorch/pytorch#13246): hold the Dataset's records in numpy arrays or Arrow instead of Python "
                f"lists of dicts or strings (or pickled into one numpy buffer with their offsets, as detectron2's "
                f"NumpySerializedList does), lower num_workers ({workers}), and keep persistent_workers off, "
                f"so each epoch's fresh workers drop the copies" + hint_more)
    elif headroom < 0:
        hint = (f"the loader alone is projected past the {size(the_limit.bytes)} it may use: lower num_workers "
                f"({workers}), prefetch_factor ({prefetch}) or batch_size, or raise the pod's memory limit")
    return [peak, Measurement("memory_headroom", headroom, "%", method=method + ", projected to one epoch",
                              reason=reason, hint=hint)]
