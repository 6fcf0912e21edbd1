"""The timed part of the storage check: windows of reads, small files and writes, sampled.

Throughputs use ``sampling.sample``: one warm-up window, then windows until the spread is
low or the ``duration`` budget is spent (torch.utils.benchmark's adaptive loop; fio's
``ramp_time`` is the same warm-up). A window is fio's ``--time_based`` run of
``window`` seconds; its rate is one sample, and the median is what thresholds compare.
``rand_read`` (with its latency percentiles) and ``fsync_p99`` come from one continuous
run each instead, cut into windows afterwards (``ContinuousRun``, see ``IO.rand_read``). A
latency percentile is taken over every operation after the warm-up, pooled, as fio reports
clat percentiles.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, NamedTuple, Sequence

from preflight.checks.base import Budget
from preflight.checks.storage import guard, reads, small_files, writes
from preflight.checks.storage.data import DataFile, write_file, write_small_files
from preflight.fsinfo import Filesystem
from preflight.io_parallel import Interval, Tally, in_intervals, run_loops
from preflight.io_uncached import Bypass, bypass_for, describe
from preflight.measurement import Measurement, unmeasurable
from preflight.sampling import sample
from preflight.units import format_value, to_unit

MIN_READ_BYTES = 16 << 20  # less data than this cannot keep readers busy for a window
MIN_SMALL_FILES = 100
MAX_AUTO_PROCESSES = 4
MIN_WINDOWS = 3  # as sampling.sample's min_samples


class IO:
    """One storage measurement session on one filesystem, with an optional scratch directory."""

    def __init__(self, options: Mapping[str, Any], budget: Budget, fs: Filesystem, scratch: str | None,
                 why_no_scratch: str) -> None:
        self.options, self.budget, self.fs = options, budget, fs
        self.scratch, self.why_no_scratch = scratch, why_no_scratch
        self.window = min(1.0, max(0.25, budget.duration_s / 6))
        self.cache_note = ""  # set when seq_read proves the cache was not bypassed

    def reads(self, existing: Sequence[DataFile]) -> list[Measurement]:
        """``seq_read``, then ``rand_read`` with its latency percentiles, over the same bytes."""
        names = ("seq_read", "rand_read", "rand_read_p50", "rand_read_p99")
        units = ("MB/s", "IOPS", "ms", "ms")
        wanted = int(self.options["data_size"])
        files, source = list(existing), f"{len(existing)} existing files"
        if sum(f.size for f in files) < min(wanted, MIN_READ_BYTES):
            if self.scratch is None:
                reason = f"{self.options['path']} holds under {MIN_READ_BYTES >> 20} MiB to read, and {self.why_no_scratch}"
                return [unmeasurable(n, reason, u) for n, u in zip(names, units)]
            files = [write_file(os.path.join(self.scratch, "seq_read.dat"), wanted, os.urandom(1 << 20))]
            source = "a scratch file"
        bypass = bypass_for(files[0].name, self.fs.memory_backed)
        size = format_value(to_unit(sum(f.size for f in files), "MiB"), "MiB")
        where = f"{source} ({size}) on {self.fs.describe()}; {describe(bypass)}"
        return [self.seq_read(files, bypass, where), *self.rand_read(files, bypass, where)]

    def seq_read(self, files: list[DataFile], bypass: Bypass, where: str) -> Measurement:
        block, readers = int(self.options["block_size"]), int(self.options["readers"])
        runs = reads.spans(files, readers, block)

        def window() -> float:
            tally = run_loops(reads.sequential_loop(runs, bypass, block), 1, readers, self.window)
            return tally.nbytes / tally.elapsed_s / 1e6

        taken = sample(window, self.budget.duration_s)
        method = f"{readers} readers x {format_value(to_unit(block, 'KiB'), 'KiB')} blocks, {where}"
        m = Measurement("seq_read", samples=taken.values, unit="MB/s", method=method, stopped=taken.stopped)
        return self._honest(m, bypass, guard.page_cache_rate(files, readers, block))

    def rand_read(self, files: list[DataFile], bypass: Bypass, where: str) -> list[Measurement]:
        """IOPS per window and pooled latency percentiles of one continuous run.

        Unlike the other metrics, not one forked run per window: a tail percentile must not
        see the start of every window (fresh processes faulting in copy-on-write pages, 32
        loops starting at once). In a probe on a 2-CPU VM, forked runs gave p99 a run-to-run
        CV of 21-35% with 0.33 s windows and 7-12% with 1 s windows; one continuous run on one
        file gave 9%, as fio psync with 32 jobs did (median p99 0.65 against 0.64 ms).
        """
        block, depth = int(self.options["rand_block"]), int(self.options["rand_depth"])
        processes, threads = self._split(depth)
        run = ContinuousRun(self.window, self.budget.duration_s)
        intervals = run.intervals(run_loops(reads.random_loop(files, bypass, block, seed=0), processes, threads,
                                            run.seconds))
        latencies = [i.latencies for i in intervals if i.latencies]
        if not latencies:
            reason = f"no read completed in {run}: the volume is stalled"
            return [unmeasurable(name, reason, unit) for name, unit in
                    (("rand_read", "IOPS"), ("rand_read_p50", "ms"), ("rand_read_p99", "ms"))]
        method = (f"{processes} processes x {threads} threads = {processes * threads} in flight, "
                  f"{format_value(to_unit(block, 'KiB'), 'KiB')} random reads, {where}")
        stopped = f"time-based: {len(intervals)} windows in {run}"
        return [self._honest(m, bypass) for m in (
            Measurement("rand_read", samples=tuple(i.ops_per_s for i in intervals), unit="IOPS", method=method,
                        stopped=stopped),
            _latency_percentile("rand_read_p50", 50, latencies, method, stopped),
            _latency_percentile("rand_read_p99", 99, latencies, method, stopped))]

    def small(self, existing: Sequence[DataFile]) -> list[Measurement]:
        """``small_files`` (files/s) and ``small_files_bandwidth`` (MB/s), cold cache per file."""
        count = int(self.options["small_file_count"])
        files, source = list(existing[:count]), f"{min(len(existing), count)} existing small files"
        if len(files) < MIN_SMALL_FILES:
            if self.scratch is None:
                reason = f"{self.options['path']} has under {MIN_SMALL_FILES} small files, and {self.why_no_scratch}"
                return [unmeasurable("small_files", reason, "files/s"),
                        unmeasurable("small_files_bandwidth", reason, "MB/s")]
            size = int(self.options["small_file_size"]) * 7 // 8
            files = write_small_files(self.scratch, count, size)
            source = f"{count} scratch files of {format_value(to_unit(size, 'KiB'), 'KiB')}"
        bypass = bypass_for(files[0].name, self.fs.memory_backed)
        processes, threads = self._split(int(self.options["file_readers"]))
        rates: list[float] = []

        def window() -> float:
            tally = run_loops(small_files.file_loop(files, processes * threads, bypass), processes, threads,
                              self.window)
            rates.append(tally.nbytes / tally.elapsed_s / 1e6)
            return tally.ops / tally.elapsed_s

        taken = sample(window, self.budget.duration_s)
        method = (f"{processes} processes x {threads} threads, open+read+close of {source} on "
                  f"{self.fs.describe()}; {describe(bypass)}")
        return [self._honest(Measurement("small_files", samples=taken.values, unit="files/s", method=method,
                                         stopped=taken.stopped), bypass),
                self._honest(Measurement("small_files_bandwidth", samples=tuple(rates[-len(taken.values):]),
                                         unit="MB/s", method=method, stopped=taken.stopped), bypass)]

    def writes(self) -> list[Measurement]:
        """``seq_write`` (MB/s, with the final fsync) and ``fsync_p99`` (ms) in the scratch directory."""
        if self.scratch is None:
            reason = f"nowhere to write scratch files: {self.why_no_scratch}"
            return [unmeasurable("seq_write", reason, "MB/s"), unmeasurable("fsync_p99", reason, "ms")]
        size, chunk = int(self.options["write_size"]), os.urandom(1 << 20)
        name = os.path.join(self.scratch, "write.dat")
        taken = sample(lambda: writes.write_once(name, size, chunk), self.budget.duration_s)
        where = f"in {self.scratch} on {self.fs.describe()}"
        method = f"{format_value(to_unit(size, 'MiB'), 'MiB')} in 1 MiB writes, then fsync, {where}"
        results = [Measurement("seq_write", samples=taken.values, unit="MB/s", method=method, stopped=taken.stopped),
                   self._fsync_p99(name, where)]
        if self.fs.memory_backed:
            results = [self._honest(m, "none") for m in results]
        return results

    def _fsync_p99(self, name: str, where: str) -> Measurement:
        """fsync p99 over one continuous append+fsync run of half the budget, after a ramp."""
        run = ContinuousRun(self.window / 2, self.budget.duration_s / 2)
        intervals = run.intervals(writes.fsync_run(name, run.seconds))
        latencies = [i.latencies for i in intervals if i.latencies]
        if not latencies:
            return unmeasurable("fsync_p99", f"no fsync completed in {run}: the volume is stalled", "ms")
        method = f"4 KiB append + fsync on one file, 99th percentile of every fsync after the ramp, {where}"
        return _latency_percentile("fsync_p99", 99, latencies, method, f"time-based: {len(intervals)} windows in {run}")

    def _split(self, loops: int) -> tuple[int, int]:
        """(processes, threads per process) for ``loops`` concurrent loops."""
        chosen = self.options["io_processes"]
        processes = min(loops, MAX_AUTO_PROCESSES if chosen == "auto" else int(chosen))
        return processes, max(1, round(loops / processes))

    def _honest(self, m: Measurement, bypass: Bypass, cache_mb_s: float | None = None) -> Measurement:
        """Mark ``m`` cache-bound when nothing bypassed the cache or its rate is implausible."""
        if bypass == "none":
            reason = self.fs.caveat() or "the page cache could not be bypassed"
            return _replace(m, reason, f"cache-bound: {reason}")
        if m.metric == "seq_read" and m.measured:
            network = self.fs.kind in ("network", "fuse")
            self.cache_note = guard.implausible(float(m.value), cache_mb_s, network,  # type: ignore[arg-type]
                                                guard.link_rate() if network else None)
        if self.cache_note and m.metric != "seq_write":
            return _replace(m, f"cache-bound: {self.cache_note}", f"implausible: {self.cache_note}")
        if bypass == "fadvise":
            return _replace(m, "O_DIRECT refused; page cache dropped with fadvise before reading", "", cache=False)
        return m


class ContinuousRun(NamedTuple):
    """A time-based run cut into windows afterwards: a warm-up window, then ``budget_s``
    (at least MIN_WINDOWS windows), as fio's ``--ramp_time`` and ``--runtime``."""

    window_s: float
    budget_s: float

    @property
    def runtime_s(self) -> float:
        return max(self.budget_s, MIN_WINDOWS * self.window_s)

    @property
    def seconds(self) -> float:
        """How long the loops run: the ramp and the runtime."""
        return self.window_s + self.runtime_s

    def intervals(self, tally: Tally) -> list[Interval]:
        return in_intervals(tally, self.window_s, self.window_s)

    def __str__(self) -> str:
        return f"{self.runtime_s:g}s of {self.window_s:g}s windows after a {self.window_s:g}s ramp"


def _latency_percentile(metric: str, q: float, windows: Sequence[Sequence[float]], method: str,
                        stopped: str) -> Measurement:
    """The ``q``-th percentile in ms of all the windows' latencies (seconds) pooled, as fio reports
    clat percentiles; ``samples`` holds each window's own percentile so the report shows the spread."""
    return Measurement(metric, reads.pooled_percentile(windows, q) * 1e3, "ms",
                       samples=tuple(reads.percentile(w, q) * 1e3 for w in windows), method=method,
                       stopped=stopped)


def _replace(m: Measurement, reason: str, warning: str, cache: bool = True) -> Measurement:
    warnings = (*m.warnings, warning) if warning else m.warnings
    return dataclasses.replace(m, reason=reason, warnings=warnings, cache_bound=cache or m.cache_bound)
