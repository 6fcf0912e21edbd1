"""The timed part of the storage check: windows of reads, small files and writes, sampled (checks layer).

Each timed part gets an equal share of ``duration`` (at least ``MIN_PART_S``); throughputs are ``sampling.sample``
windows (fio ``--time_based``), their median judged; ``rand_read`` and ``fsync_p99`` are one continuous run each,
percentiles pooled as fio's clat. Scratch not verified beside the dataset is ``scratch_elsewhere``. docs/checks.md.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from preflight.checks import subject
from preflight.checks import base
from preflight.checks.base import Budget
from preflight.checks.storage import guard, reads, small_files, writes
from preflight.checks.storage.data import LARGE_FILE, Found, Segment, data_bytes, segments
from preflight.checks.storage.facts import READ_ONLY_VOLUME
from preflight.checks.storage.parts import MIN_WINDOW_S, MIN_WINDOWS, part_s, timed_parts
from preflight.io.dataset import MIN_SHARE, SHARE, WARM, Spent, warm_note
from preflight.io.dataset_walk import DataFile, data_extents, too_few
from preflight.host import pids
from preflight.host.fsinfo import Filesystem, filesystem_of
from preflight.io.parallel import Interval, Tally, in_intervals, run_loops
from preflight.io.uncached import Bypass, bypass_for, describe
from preflight.measurement import Measurement, unmeasurable, verdict_floor
from preflight import sampling
from preflight.sampling import sample
from preflight.io.scratch import room_for, write_file, write_small_files
from preflight.units import format_value, to_unit

MIN_READ_BYTES = 16 << 20  # less data than this cannot keep readers busy for a window
SCAN_TICK_S = 2.0  # scan: all reads in rounds this long, a progress line after each
MAX_AUTO_PROCESSES = 4
PIDS_RESERVE = 8  # tasks left to the worker's own threads when a pids limit sizes the I/O pool
MAX_RANDOM_FILES = 128  # rand_read keeps one descriptor per file in each process
READ_METRICS = (("seq_read", "MB/s"), ("rand_read", "IOPS"), ("rand_read_p50", "ms"), ("rand_read_p99", "ms"))


class ReadSet(NamedTuple):
    """The bytes seq_read and rand_read read, in words for the method, and the note for the table."""

    parts: list[Segment]
    where: str  # "3 existing files of 8 MiB or more (400 MiB)"
    note: str  # "" when they are the dataset's own large files
    fs: Filesystem  # the filesystem those bytes are on: the dataset's, or the scratch directory's
    whole_files: bool = False  # small files, each read whole by one request
    subject: str = "dataset"  # what the bytes are: the dataset's, or scratch (``subject.scratch_subject``)


class IO:
    """One storage measurement session on one filesystem, with an optional scratch directory."""

    def __init__(self, options: Mapping[str, Any], budget: Budget, fs: Filesystem, scratch: str | None,
                 why_no_scratch: str, dataset_device: tuple[int, str] = (-1, ""), dataset_named: bool = True) -> None:
        self.options, self.budget, self.fs = options, budget, fs  # fs: the one holding the dataset's bytes
        self.dataset = budget.with_dataset().dataset  # the run's: its one pass over the files
        self.dataset_named = dataset_named  # else ``path`` is the working directory (``subject.named``)
        self.scratch, self.why_no_scratch = scratch, why_no_scratch
        self.dataset_device = dataset_device  # (st_dev, mount source) of the dataset's bytes
        self.scratch_fs = _filesystem(scratch, fs) if scratch else fs  # where scratch data really lies
        self.path = options["path"]
        self.instance = budget.named("storage")  # the configuration's name for these options, in fixes
        self.part_s = part_s(budget)  # each timed part's share of duration, its warm-up included
        # and of max_duration: how long a part whose figure its interval does not decide may go on (issue 44)
        self.longest_part_s = self.part_s * budget.longest_s / budget.duration_s if budget.duration_s else self.part_s
        # One window length at every duration: a longer duration buys more windows, as `preflight diff` holds the
        # run-to-run floor by their count (``report.noise.FLOOR_SAMPLES``) and names the duration that would tell.
        self.window = MIN_WINDOW_S
        self.cache_note = ""  # set when seq_read proves the cache was not bypassed
        self.failed: set[str] = set()  # dataset files whose reads failed with an I/O error (EIO), by any part
        self.unstreamed: list[Segment] = []  # large files' bytes seq_read did not reach, where it streams once

    def _failed_reads(self, names: Sequence[str]) -> None:
        """Count ``names`` (reads failed with an I/O error) for ``unreadable_files``, and record them as the run's
        dataset's faults, which every row counting them reads (issue 43)."""
        for name in set(names) - self.failed:
            self.dataset.record_failure(name, "cannot be read: [Errno 5] Input/output error")
        self.failed.update(names)

    def reads(self, found: Found) -> list[Measurement]:
        """``seq_read``, then ``rand_read`` with its latency percentiles, over the same bytes."""
        chosen = self._read_set(found)
        if isinstance(chosen, str):
            return [unmeasurable(n, chosen, u) for n, u in READ_METRICS]
        fs = chosen.fs
        bypass = bypass_for([name for name, _, _ in chosen.parts[:100]], fs.memory_backed, self.dataset)
        where = f"{chosen.where} on {fs.describe()}; {describe(bypass)}"
        seq = self.seq_read(chosen.parts, bypass, where, chosen.whole_files, fs)
        # Small files read whole: random reads take their own share of files not read yet, so small_files and
        # the DataLoader still find first touches (``Dataset.share``); large files are read at random offsets.
        random_parts, reread = chosen.parts, ""
        if chosen.whole_files:
            random_parts = self.dataset.share(chosen.parts, len(chosen.parts), _segment_name) or chosen.parts
        elif fs.may_cache_below:  # the bytes seq_read's one stream did not reach; none left: a reread, said so
            random_parts = self.unstreamed or chosen.parts
            files = len({name for name, _, _ in chosen.parts})
            reread = "" if self.unstreamed else warm_note(files, files)
        randoms = [_noted(m, reread) for m in self.rand_read(random_parts, bypass, where, fs, once=chosen.whole_files)]
        results = [seq, *randoms]
        return [self._about(_noted(m, chosen.note), chosen.subject) for m in results]

    def _read_set(self, found: Found) -> ReadSet | str:
        """The dataset's large files; else a scratch file verified beside it; else its own files read whole, labelled
        (the job's data on the job's device); else a scratch file elsewhere, which cannot stand for it; else why not."""
        wanted = int(self.options["data_size"])
        large = segments(found.large, wanted)
        if data_bytes(large) >= min(wanted, MIN_READ_BYTES):
            return ReadSet(large, f"{len(found.large)} existing files of {_mib(LARGE_FILE)} or more "
                           f"({_mib(data_bytes(large))} of data)", _sparse_note(found.large), self.fs)
        what = found.walk.holds(found.files, self.path)  # all of path, or the files the walk reached
        streamable = (f"only {_mib(data_bytes(large))} in files of {_mib(LARGE_FILE)} or more" if large
                      else f"none of {_mib(LARGE_FILE)} or more")
        no_room = self.why_no_scratch or room_for(self.scratch or "", wanted)
        verified = not no_room and self._scratch_subject() == "scratch_on_dataset_fs"
        own = [] if verified else segments(found.devices[0] if found.devices else [], wanted)
        if data_bytes(own) >= MIN_READ_BYTES:
            count = len({name for name, _, _ in own})
            why = no_room or f"scratch in {self.scratch} would not lie on the dataset's filesystem and device"
            kind = (f"files read whole ({streamable}" if large
                    else f"small files read whole (no file of {_mib(LARGE_FILE)} or more")
            return ReadSet(own, f"{count} existing files read whole ({_mib(data_bytes(own))})",
                           f"over {count} {kind}, and {why}): not a device streaming figure", self.fs, whole_files=True)
        if not no_room:
            scratch = write_file(os.path.join(self.scratch, "seq_read.dat"), wanted, os.urandom(1 << 20))  # type: ignore[arg-type]
            return ReadSet(segments([scratch], wanted), f"a scratch file ({_mib(wanted)}) in {self.scratch}",
                           f"on a scratch file {self._scratch_place()}: {what}, {streamable}", self.scratch_fs,
                           subject=self._scratch_subject())
        return f"{what}, under {_mib(MIN_READ_BYTES)} to read, and {no_room}"

    def seq_read(self, parts: list[Segment], bypass: Bypass, where: str, whole_files: bool,
                 fs: Filesystem) -> Measurement:
        """``readers`` threads over contiguous spans; over small files read whole, processes x threads (threads of one
        process wait on each other's GIL there: docs/checks.md, ``seq_read``)."""
        block, readers = int(self.options["block_size"]), int(self.options["readers"])
        processes, threads = self._split(readers) if whole_files else (1, readers)
        runs = reads.spans(parts, processes * threads, block)
        lost: list[int] = []
        before = self.dataset.mark()
        # Small files: one pass, windows continuing it. Large files: each window from the spans' start, as fio,
        # except below a possible cache (FUSE, NFS): the stream continues (kahing/goofys#581, s3fs-fuse/s3fs-fuse#829).
        streamed_once = not whole_files and fs.may_cache_below
        remaining = (self.dataset.share(parts, len(parts), _segment_name) if whole_files
                     else self.dataset.fresh(parts, _segment_name) if streamed_once else list(parts))
        files = len({name for name, _, _ in parts})
        warm = warm_note(files, files) if not remaining else ""
        remaining = remaining or list(parts)
        share = len({name for name, _, _ in remaining})
        self.unstreamed = list(remaining) if streamed_once and not warm else []

        spans: list[tuple[int, float]] = []  # each window's files read and seconds (``_short``)

        def window() -> float:
            nonlocal remaining
            if not remaining or streamed_once and sum(high - low for _, low, high in remaining) < block:
                raise Spent(f"each of its {share} files read once" if whole_files
                            else f"each byte of its {share} files streamed once")
            readers = processes * threads  # files read whole are dealt out whole; large files split in spans
            runs = ([remaining[i::readers] for i in range(readers)] if whole_files
                    else reads.spans(remaining, readers, block))
            left: list[list[Segment]] | None = [[] for _ in runs] if streamed_once else None
            loops = reads.sequential_loop(runs, bypass, block, once=whole_files or streamed_once, left=left,
                                          dataset=self.dataset)
            tally = run_loops(loops, processes, threads, self.window)
            if whole_files:
                unread = self.dataset.unread_since(remaining, before, _segment_name)
                if unread and data_bytes(unread) < tally.nbytes / 2:  # the share's tail: this window takes it
                    tail = run_loops(reads.sequential_loop([unread[i::readers] for i in range(readers)], bypass,
                                                           block, once=True, dataset=self.dataset),
                                     processes, threads, self.window)
                    tally = tally._replace(nbytes=tally.nbytes + tail.nbytes, lost=tally.lost + tail.lost,
                                           elapsed_s=tally.elapsed_s + tail.elapsed_s, failed=tally.failed + tail.failed)
                    unread = self.dataset.unread_since(remaining, before, _segment_name)
                spans.append((len({n for n, _, _ in remaining}) - len({n for n, _, _ in unread}), tally.elapsed_s))
                remaining = unread
            elif left is not None:
                remaining = [segment for run in left for segment in run]
                self.unstreamed = remaining
            lost.append(tally.lost)
            self._failed_reads(tally.failed)
            return tally.nbytes / tally.elapsed_s / 1e6

        def more() -> bool:  # undecided with its share read: further files of the same first pass
            nonlocal remaining, share
            remaining = self.dataset.further(parts, len(parts), _segment_name) if whole_files else []
            share += len({name for name, _, _ in remaining})
            return bool(remaining)

        # Files read whole: a window can be one share read in milliseconds, a throttle's start-up burst (issue 44):
        # decided on the time its windows spent reading, so a short figure reads on unless EXTEND_FACTOR away.
        decider = self.budget.decider("seq_read", floor=_floor("seq_read"))
        decided = _read_for(decider, spans) if whole_files else decider
        taken = sample(window, self.part_s, decided=decided, max_s=self.longest_part_s, more=more)
        who = f"{processes} processes x {threads} threads" if processes > 1 else f"{readers} readers"
        method = f"{who} x {format_value(to_unit(block, 'KiB'), 'KiB')} blocks, {where}"
        m = Measurement("seq_read", samples=taken.values, unit="MB/s", method=method, stopped=taken.stopped,
                        floor=_floor("seq_read"),
                        note="; ".join(n for n in (warm, _lost_note(sum(lost))) if n),
                        warnings=_short(spans[-len(taken.values):], share < len(parts)) if whole_files else ())
        # Probed only where the bypass can fail silently (fadvise, FUSE, network, overlay): O_DIRECT on a local
        # block device is honoured. Small files are read once each: a probe's rereads would hit a FUSE cache.
        trusted = bypass == "O_DIRECT" and fs.kind == "block" or whole_files or streamed_once
        return self._honest(m, bypass, fs, None if trusted else guard.page_cache_rate(runs, block, processes))

    def rand_read(self, parts: list[Segment], bypass: Bypass, where: str, fs: Filesystem,
                  once: bool = False) -> list[Measurement]:
        """IOPS per window and pooled latency percentiles of one continuous run, not a forked run per window, whose
        start-ups would land in the tail (docs/checks.md, ``rand_read``). At most ``MAX_RANDOM_FILES`` files (and a
        quarter of the open-file limit): each process holds one descriptor per file."""
        block, depth = int(self.options["rand_block"]), int(self.options["rand_depth"])
        processes, threads = self._split(depth)
        parts = _within_descriptors(parts, min(MAX_RANDOM_FILES, _open_files_limit() // 4))
        run = ContinuousRun(self.window, self.part_s - self.window)
        loops = reads.random_loop(parts, bypass, block, seed=0, once_of=processes * threads if once else 0,
                                  dataset=self.dataset)
        tally = run_loops(loops, processes, threads, run.seconds)
        self._failed_reads(tally.failed)
        intervals = run.intervals(tally)
        stopped = f"time-based: {len(intervals)} windows in {run}"
        decided, extra_s = self.budget.decider("rand_read"), self.longest_part_s - self.part_s
        if (decided is not None and not once and extra_s >= 2 * self.window and intervals
                and not decided([i.ops_per_s for i in intervals], run.runtime_s)):  # undecided: a further run
            longer = ContinuousRun(self.window, extra_s - self.window)
            more = run_loops(reads.random_loop(parts, bypass, block, seed=1, dataset=self.dataset), processes,
                             threads, longer.seconds)
            self._failed_reads(more.failed)
            tally = tally._replace(ops=tally.ops + more.ops, lost=tally.lost + more.lost)
            intervals += longer.intervals(more)
            stopped += f"; its interval straddled the threshold: {longer} more"
        if once and not any(i.latencies for i in intervals) and tally.ops:  # one block of each file, all read
            intervals = [Interval(tally.ops / max(tally.elapsed_s, 1e-9), tally.latencies)]  # inside the ramp
            stopped = f"one random block of each of its {len(parts)} files read once, in {tally.elapsed_s:.2f} s"
        latencies = [i.latencies for i in intervals if i.latencies]
        if not latencies:
            reason = f"no read completed in {run}: the volume is stalled"
            if tally.lost:
                reason = f"every file to read vanished or turned unreadable ({tally.lost})"
            return [unmeasurable(name, reason, unit) for name, unit in READ_METRICS[1:]]
        method = (f"{processes} processes x {threads} threads = {processes * threads} in flight, "
                  f"{format_value(to_unit(block, 'KiB'), 'KiB')} random reads, {where}")
        note = _lost_note(tally.lost)
        return [self._honest(dataclasses.replace(m, note=note), bypass, fs) for m in (
            Measurement("rand_read", samples=tuple(i.ops_per_s for i in intervals), unit="IOPS", method=method,
                        stopped=stopped),
            _latency_percentile("rand_read_p50", 50, latencies, method, stopped),
            _latency_percentile("rand_read_p99", 99, latencies, method, stopped))]

    def small(self, found: Found) -> list[Measurement]:
        """``small_files`` (files/s) and ``small_files_bandwidth`` (MB/s), cold cache per file."""
        count = int(self.options["small_file_count"])
        unread = self.dataset.fresh(found.small, _name)  # first touches first: an earlier part read some
        fresh = set(unread)
        files = (unread + [f for f in found.small if f not in fresh])[:count]
        source, note = f"{min(len(found.small), count)} existing small files", ""
        fs, measured_on = self.fs, "dataset"
        limit = format_value(to_unit(int(self.options["small_file_size"]), "KiB"), "KiB")
        too_little = too_few(found.small, f"{self.path} (files up to {limit})", walk=found.walk)
        if too_little:
            size = int(self.options["small_file_size"]) * 7 // 8
            no_room = self.why_no_scratch or room_for(self.scratch or "", count * (size + 4096), count + 100)
            if no_room:
                reason = f"{too_little}, and {no_room}"
                return [unmeasurable("small_files", reason, "files/s"),
                        unmeasurable("small_files_bandwidth", reason, "MB/s")]
            files = write_small_files(self.scratch, count, size)  # type: ignore[arg-type]
            source = f"{count} scratch files of {format_value(to_unit(size, 'KiB'), 'KiB')}"
            note = f"on {source} {self._scratch_place()}: {too_little}"
            source += f" in {self.scratch}"
            fs, measured_on = self.scratch_fs, self._scratch_subject()
        bypass = bypass_for([f.name for f in files[:1000]], fs.memory_backed, self.dataset)  # probes one not read
        processes, threads = self._split(int(self.options["file_readers"]))
        rates: list[float] = []
        lost: list[int] = []
        spans: list[tuple[int, float]] = []  # each window's files read and seconds
        before = self.dataset.mark()
        # One pass: windows continue it; the dataset's own files leave the rest of a small dataset to later readers.
        remaining = self.dataset.fresh(files, _name) if too_little else self.dataset.share(files, len(found.files), _name)
        warm = warm_note(len(files), len(files)) if not remaining else ""
        remaining = remaining or list(files)
        share = len(remaining)

        def window() -> float:
            nonlocal remaining
            if not remaining:
                raise Spent(f"each of its {share} files read once")
            loops = small_files.file_loop(remaining, processes * threads, bypass, self.dataset)
            tally = run_loops(loops, processes, threads,
                              self.window)
            remaining = self.dataset.unread_since(remaining, before, _name)
            rates.append(tally.nbytes / tally.elapsed_s / 1e6)
            spans.append((tally.ops, tally.elapsed_s))
            lost.append(tally.lost)
            self._failed_reads(tally.failed)
            return tally.ops / tally.elapsed_s

        shares = 1

        def more() -> bool:  # undecided with its share read: further files of the same first pass
            nonlocal remaining, share, shares, files
            # from every small file the walk found, past small_file_count: at 12,000 files/s its 1,000 files span
            # 80 ms, a figure too short to decide within 3x of any threshold however long max_duration is
            remaining = [] if too_little else self.dataset.further(found.small, len(found.files), _name)
            counted = {_name(f) for f in files}
            files = files + [f for f in remaining if _name(f) not in counted]
            share, shares = share + len(remaining), shares + bool(remaining)
            return bool(remaining)

        decider = self.budget.decider("small_files", floor=_floor("small_files"))
        taken = sample(window, self.part_s, decided=_read_for(decider, spans),
                       max_s=self.longest_part_s, more=more)
        note = "; ".join(n for n in (note, warm, _lost_note(sum(lost))) if n)
        if not too_little:  # further shares may have gone past small_file_count
            source = f"{len(files)} existing small files"
        if share < len(files):  # the first-epoch rule left the rest of the dataset to later readers: say so
            rule = f"{SHARE:.0%} of the dataset's {len(found.files)} files, at least {MIN_SHARE}"
            source = (f"up to {share} of {source}, each once (its share of the first epoch: {rule})" if shares == 1
                      else f"up to {share} of {source}, each once ({shares} shares of the first epoch, each {rule}: "
                           f"the threshold was undecided after the first)")
        method = (f"{processes} processes x {threads} threads, open+read+close of {source} on "
                  f"{fs.describe()}; {describe(bypass)}")
        warnings = _short(spans[-len(taken.values):], share < len(files))
        return [self._about(self._honest(m, bypass, fs), measured_on) for m in (
            Measurement("small_files", samples=taken.values, unit="files/s", method=method, stopped=taken.stopped,
                        note=note, warnings=warnings, floor=_floor("small_files")),
            Measurement("small_files_bandwidth", samples=tuple(rates[-len(taken.values):]), unit="MB/s",
                        method=method, stopped=taken.stopped, note=note, warnings=warnings,
                        floor=_floor("small_files_bandwidth")))]

    def scan(self, found: Found, seconds: float) -> str:
        """``scan: all``: every file the walk found and no check of the run read yet, read whole once by
        ``file_readers`` readers, each I/O error counted (``unreadable_files``), for at most ``seconds``, with
        progress (``base.on_progress``); returns what it read, or how far it got."""
        files = self.dataset.fresh(found.files, _name)
        total, nbytes, start = len(files), 0, time.monotonic()
        bypass = bypass_for([f.name for f in files[:1000]], self.fs.memory_backed, self.dataset) if files else "none"
        processes, threads = self._split(int(self.options["file_readers"]))
        while files and time.monotonic() - start < seconds:
            loops = small_files.file_loop(files, processes * threads, bypass, self.dataset)
            tally = run_loops(loops, processes, threads, min(SCAN_TICK_S, seconds - (time.monotonic() - start)))
            self._failed_reads(tally.failed)
            nbytes += tally.nbytes
            files = self.dataset.fresh(files, _name)
            elapsed = time.monotonic() - start
            rate = (total - len(files)) / max(elapsed, 1e-9)
            base.on_progress(f"scan: {total - len(files):,} of {total:,} files, {format_value(nbytes / 1e6, 'MB')}, "
                             f"{rate:,.0f} files/s" + (f", ~{len(files) / rate:.0f} s left" if rate > 0 else ""))
        done, elapsed = total - len(files), time.monotonic() - start
        rate = f"{format_value(nbytes / 1e6, 'MB')}, {done / max(elapsed, 1e-9):,.0f} files/s"
        if not files:
            return f"scan: all read the rest of the {len(found.files):,} files: {done:,} in {elapsed:.1f} s ({rate})"
        return (f"scan: all stopped at the check's timeout with {len(files):,} of the {len(found.files):,} files not "
                f"read ({done:,} read in {elapsed:.1f} s, {rate}): raise the instance's timeout to read them all")

    def writes(self) -> list[Measurement]:
        """``seq_write`` (MB/s, with the final fsync) and ``fsync_p99`` (ms) in the scratch directory, each only
        when asked for (``timed_parts``): nothing is written for a configuration that judges neither."""
        where = f"in {self.scratch} on {self.scratch_fs.describe()}"
        results = []
        if "seq_write" in timed_parts(self.budget):
            results.append(self._seq_write(where))
        if "fsync_p99" in timed_parts(self.budget):
            no_room = self.why_no_scratch or room_for(self.scratch or "", writes.FSYNC_FILE_BYTES)
            results.append(unmeasurable("fsync_p99", f"nowhere to write scratch files: {no_room}", "ms") if no_room
                           else self._fsync_p99(os.path.join(self.scratch, "fsync.dat"), where))  # type: ignore[arg-type]
        measured_on = self._scratch_subject()
        if measured_on == "scratch_elsewhere":  # the table says where, not only the method
            results = [_noted(m, f"written {self._scratch_place()}") for m in results]
        results = [self._about(m, measured_on) for m in results]
        if self.scratch_fs.memory_backed:
            results = [self._honest(m, "none", self.scratch_fs) if m.measured else m for m in results]
        return results

    def _seq_write(self, where: str) -> Measurement:
        """``write_size`` written then fsynced, per sample, within the part's share (at least a warm-up and 3)."""
        size = int(self.options["write_size"])
        no_room = self.why_no_scratch or room_for(self.scratch or "", size)
        if no_room:
            return unmeasurable("seq_write", f"nowhere to write scratch files: {no_room}", "MB/s")
        name = os.path.join(self.scratch, "write.dat")  # type: ignore[arg-type]
        chunk = os.urandom(1 << 20)
        taken = sample(lambda: writes.write_once(name, size, chunk), self.part_s,
                       decided=self.budget.decider("seq_write", floor=_floor("seq_write")), max_s=self.longest_part_s)
        method = f"{format_value(to_unit(size, 'MiB'), 'MiB')} in 1 MiB writes, then fsync, {where}"
        return Measurement("seq_write", samples=taken.values, unit="MB/s", method=method, stopped=taken.stopped,
                           floor=_floor("seq_write"))

    def _fsync_p99(self, name: str, where: str) -> Measurement:
        """fsync p99 over one continuous append+fsync run of the part's share, after a ramp of half a window."""
        run = ContinuousRun(self.window / 2, self.part_s - self.window / 2)
        intervals = run.intervals(writes.fsync_run(name, run.seconds))
        latencies = [i.latencies for i in intervals if i.latencies]
        if not latencies:
            return unmeasurable("fsync_p99", f"no fsync completed in {run}: the volume is stalled", "ms")
        method = f"4 KiB append + fsync on one file, 99th percentile of every fsync after the ramp, {where}"
        return _latency_percentile("fsync_p99", 99, latencies, method, f"time-based: {len(intervals)} windows in {run}")

    def _scratch_subject(self) -> str:
        """What scratch data stands for: the dataset's device only when verified there (``subject``)."""
        return subject.scratch_subject(self.scratch or "", *self.dataset_device)

    def _scratch_place(self) -> str:
        """Where the scratch data lies, in the words of the table's note."""
        if self._scratch_subject() == "scratch_on_dataset_fs":
            return "beside the dataset" if self.dataset_named else "beside the working directory's data"
        fs = self.scratch_fs
        return (f"in {self.scratch} on {fs.fstype} at {fs.mount_point} ({fs.source}), not on the dataset's "
                f"filesystem and device")

    def scratch_hint(self) -> str:
        """The fix for a figure measured on scratch that is not on the dataset's filesystem and device."""
        if self.fs.read_only:
            return f"{self.fs.describe()} is read-only; {READ_ONLY_VOLUME.format(instance=self.instance)}"
        return (f"set {self.instance}.scratch_dir to a writable directory on {self.fs.describe()}, the filesystem that "
                f"holds the dataset's bytes, outside {self.path}, so scratch figures stand for it")

    def _about(self, m: Measurement, measured_on: str) -> Measurement:
        """``m`` labelled with what it was measured on (nothing when it was not measured), with the fix when that
        is scratch elsewhere: the only way such a figure can pass is scratch on the dataset's device."""
        if not m.measured:
            return m
        if measured_on == "dataset":
            measured_on = subject.of_reads(measured_on, WARM in m.note, self.fs)
        if measured_on == "scratch_elsewhere":
            return dataclasses.replace(m, subject=measured_on, hint=self.scratch_hint())
        return dataclasses.replace(m, subject=measured_on)

    def _split(self, loops: int) -> tuple[int, int]:
        """(processes, threads per process) for ``loops`` concurrent loops."""
        chosen = self.options["io_processes"]
        processes = min(loops, MAX_AUTO_PROCESSES if chosen == "auto" else int(chosen))
        # Every loop is a task: the pool shrinks to what the pids limit leaves, less PIDS_RESERVE (issue 33).
        return pids.affordable(processes, max(1, round(loops / processes)), pids.spare(reserve=PIDS_RESERVE))

    def _honest(self, m: Measurement, bypass: Bypass, fs: Filesystem, cache_mb_s: float | None = None) -> Measurement:
        """Mark ``m`` cache-bound when nothing bypassed the cache or its rate is implausible; ``fs`` holds its bytes."""
        if bypass == "none":
            reason = fs.caveat() or "the page cache could not be bypassed"
            return _replace(m, reason, f"cache-bound: {reason}")
        if m.metric == "seq_read" and m.measured:
            network = fs.kind in ("network", "fuse")
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


def _floor(metric: str) -> float:
    """The least half-width of ``metric``'s interval, a fraction of its value: the runs' spread that one run's
    windows cannot show (``measurement.verdict_floor``)."""
    return verdict_floor(f"storage.{metric}")


def _read_for(decided: Callable[[Sequence[float], float], bool] | None,
              spans: Sequence[tuple[int, float]]) -> Callable[[Sequence[float], float], bool] | None:
    """The stopping rule of small_files, and of seq_read over files read whole: ``decided`` over the time its kept
    windows spent reading (``spans``), the span ``_short`` warns on, not the wall time around them (each window forks
    its readers)."""
    if decided is None:
        return None
    return lambda samples, _: decided(samples, sum(seconds for _, seconds in spans[-len(samples):]))


def _short(kept: Sequence[tuple[int, float]], shared: bool) -> tuple[str, ...]:
    """small_files' ``short: `` warning where its kept windows spanned under ``sampling.MIN_SPAN_S``, with the dataset
    size that would give that span (``shared``: the share rule bounded it), else more small files."""
    files, span_s = sum(ops for ops, _ in kept), sum(seconds for _, seconds in kept)
    if not files or not span_s:
        return ()
    rate = files / span_s
    fix = (f"a dataset of about {sampling.files_for_span(rate, SHARE)} files gives it "
           f"{sampling.MIN_SPAN_S:g} s at this rate" if shared
           else f"about {sampling.files_for_span(rate, 1.0)} small files would give it {sampling.MIN_SPAN_S:g} s "
                f"(small_file_count)")
    warning = sampling.short_warning(f"{len(kept)} sample{'s' if len(kept) != 1 else ''} of {files} files",
                                     span_s, fix)
    return (warning,) if warning else ()


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


def _noted(m: Measurement, note: str) -> Measurement:
    if not note or not m.measured:
        return m
    return dataclasses.replace(m, note="; ".join(n for n in (note, m.note) if n))


def _name(file: DataFile) -> str:
    return file.name


def _segment_name(part: Segment) -> str:
    return part[0]


def _lost_note(lost: int) -> str:
    return f"{lost} file(s) vanished or turned unreadable during the run and were skipped" if lost else ""


def _mib(nbytes: int) -> str:
    """A byte size in the unit that fits it (``units.format_value``): "0 B", "512 KiB", "8 MiB"."""
    return format_value(float(nbytes), "B")


def _sparse_note(files: Sequence[DataFile]) -> str:
    """What the table must say when some of ``files`` have holes (their data extents alone were read)."""
    holes = [f.size - sum(length for _, length in data_extents(f.name, f.size)) for f in files if f.maybe_sparse]
    holes = [h for h in holes if h > 0]
    if not holes:
        return ""
    return (f"{len(holes)} sparse file(s): {_mib(sum(holes))} of holes skipped, only data extents read "
            f"(a hole never reaches the device)")


def _within_descriptors(parts: list[Segment], files: int) -> list[Segment]:
    """The segments of the first ``files`` distinct files."""
    names = list(dict.fromkeys(name for name, _, _ in parts))[: max(1, files)]
    keep = set(names)
    return [part for part in parts if part[0] in keep]


def _filesystem(directory: str, otherwise: Filesystem) -> Filesystem:
    """``directory``'s filesystem, or ``otherwise`` when it is gone (then writing there fails, and says so)."""
    try:
        return filesystem_of(directory)
    except OSError:
        return otherwise


def _open_files_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20
