"""Storage I/O on the dataset path: sequential read throughput from the device, not the page cache.

Method: fio's ``--rw=read --direct=1 --bs=1M`` (fio(1), "direct" and "bs"), in Python:
the files are opened with O_DIRECT and read into a page-aligned buffer with
``os.preadv``, so every byte comes from the device. Where the filesystem refuses O_DIRECT
(EINVAL: tmpfs, some FUSE and overlay setups) the file's cached pages are dropped with
``posix_fadvise(POSIX_FADV_DONTNEED)`` before each pass instead; the report names the
method used. On a memory-backed filesystem neither can reach a device, and the number is
marked cache-bound.

The dataset path is opened read-only and never written. When it holds too little data to
read, a scratch file is written in ``scratch_dir`` (default: the nearest writable directory
above the path on the same filesystem, in a hidden directory removed afterwards); a
``scratch_dir`` inside the path is refused when the config is loaded.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from typing import Any, Mapping

from preflight.checks.base import Budget, Metric, Option
from preflight.fsinfo import filesystem_of
from preflight.measurement import Measurement, unmeasurable
from preflight.sampling import sample
from preflight.scratch import PREFIX, parent_outside, scratch_dir
from preflight.units import Dimension, format_value, to_unit

NAME = "storage"
HELP = "sequential read throughput of the dataset path, bypassing the page cache (O_DIRECT, else fadvise)"
OPTIONS = (
    Option("path", "path", ".", "directory (or file) whose filesystem to measure; read-only"),
    Option("block_size", Dimension.SIZE, "1 MiB", "bytes per read request, as fio --bs", minimum=4096),
    Option("data_size", Dimension.SIZE, "256 MiB", "bytes per pass; existing files are read first, else a scratch file"),
    Option("scratch_dir", "text", "", "where a scratch file may be written, outside path (default: the nearest "
           "writable directory above path on its filesystem; removed after)", outside="path"),
    Option("max_files", "int", 10000, "files under path to consider when looking for data to read", minimum=1),
)
METRICS = (
    Metric(
        "seq_read",
        "MB/s",
        True,
        "sequential read throughput, 1 MB = 10^6 bytes; median of timed passes over the same bytes "
        "(fio --rw=read --direct=1 method)",
    ),
)

MIN_PASS_BYTES = 16 << 20  # below this a pass is too short to time; reuse files to reach it


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure ``seq_read`` on ``options["path"]``; unmeasurable with a reason if impossible."""
    path = options["path"]
    if not os.path.exists(path):
        return [unmeasurable("seq_read", f"{path} does not exist: mount the dataset or set storage.path", "MB/s")]
    files = _existing_files(path, int(options["data_size"]), int(options["max_files"]))
    if sum(size for _, size in files) >= min(int(options["data_size"]), MIN_PASS_BYTES):
        return [_measure_files(path, files, options, budget, source=f"{len(files)} existing files")]
    parent = options["scratch_dir"] or parent_outside(path)
    if parent is None:
        reason = (f"{path} holds too little data to read and is its own filesystem's top, where preflight will "
                  f"not write: set storage.scratch_dir to a writable directory on that filesystem, outside {path}")
        return [unmeasurable("seq_read", reason, "MB/s")]
    try:
        with scratch_dir(parent, protect=path) as directory:
            scratch = _write_scratch(directory, int(options["data_size"]))
            return [_measure_files(path, [(scratch, int(options["data_size"]))], options, budget, "a scratch file")]
    except OSError as error:
        reason = (
            f"{path} holds too little data to read and no scratch file could be written in {parent} "
            f"({error.strerror}): set storage.scratch_dir to a writable directory on the same filesystem"
        )
        return [unmeasurable("seq_read", reason, "MB/s")]


def _measure_files(path: str, files: list[tuple[str, int]], options: Mapping[str, Any], budget: Budget,
                   source: str) -> Measurement:
    block = int(options["block_size"])
    fs = filesystem_of(path)
    direct = _direct_supported(files[0][0], block)
    reader = _DirectReader(block) if direct else _FadviseReader(block)
    total = sum(size for _, size in files)

    def one_pass() -> float:
        start = time.perf_counter()
        read = sum(reader.read_file(name) for name, _ in files)
        return read / (time.perf_counter() - start) / 1e6

    try:
        samples = sample(one_pass, budget.duration_s)
    except OSError as error:
        return unmeasurable("seq_read", f"reading {path} failed: {error.strerror}", "MB/s")
    method = (
        f"{'O_DIRECT' if direct else 'posix_fadvise(DONTNEED) before each pass'}, "
        f"{format_value(to_unit(block, 'KiB'), 'KiB')} blocks, 1 reader, {source} "
        f"({format_value(to_unit(total, 'MiB'), 'MiB')} per pass) on {fs.describe()}"
    )
    reason = ""
    if fs.memory_backed:
        reason = f"{path} is on {fs.fstype}: this is memory speed, cache-bound, not a storage device"
    elif not direct:
        reason = "O_DIRECT refused by the filesystem; page cache dropped with fadvise before each pass"
    return Measurement("seq_read", samples=samples.values, unit="MB/s", method=method, reason=reason,
                       stopped=samples.stopped)


def _existing_files(path: str, wanted: int, max_files: int) -> list[tuple[str, int]]:
    """The largest readable regular files under ``path`` until ``wanted`` bytes (scratch files skipped)."""
    if os.path.isfile(path):
        return [(path, os.path.getsize(path))]
    found: list[tuple[str, int]] = []
    for root, directories, names in os.walk(path, onerror=lambda error: None):
        directories[:] = [d for d in directories if not d.startswith(PREFIX)]
        for name in names:
            full = os.path.join(root, name)
            try:
                if os.path.isfile(full) and not os.path.islink(full) and os.access(full, os.R_OK):
                    found.append((full, os.path.getsize(full)))
            except OSError:
                continue
            if len(found) >= max_files:
                break
        if len(found) >= max_files:
            break
    found.sort(key=lambda item: -item[1])
    chosen, total = [], 0
    for name, size in found:
        if total >= wanted or size == 0:
            break
        chosen.append((name, size))
        total += size
    return chosen


def _write_scratch(directory: str, size: int) -> str:
    """Write ``size`` bytes of incompressible data, fsync it, and drop it from the page cache."""
    name = os.path.join(directory, "seq_read.dat")
    block = os.urandom(1 << 20)
    with open(name, "wb") as handle:
        written = 0
        while written < size:
            written += handle.write(block[: min(len(block), size - written)])
        handle.flush()
        os.fsync(handle.fileno())
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return name


def _direct_supported(name: str, block: int) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECT)
    except OSError as error:
        if error.errno == errno.EINVAL:
            return False
        raise
    try:
        buffer = mmap.mmap(-1, block)
        os.preadv(fd, [buffer], 0)
        return True
    except OSError as error:
        if error.errno == errno.EINVAL:
            return False
        raise
    finally:
        os.close(fd)


class _DirectReader:
    """Reads whole files with O_DIRECT into one page-aligned buffer (mmap memory is page-aligned)."""

    def __init__(self, block: int) -> None:
        self.buffer = mmap.mmap(-1, block)

    def read_file(self, name: str) -> int:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECT)
        try:
            total, offset = 0, 0
            while True:
                got = os.preadv(fd, [self.buffer], offset)
                if got <= 0:
                    return total
                total += got
                offset += got
                if got < len(self.buffer):
                    return total
        finally:
            os.close(fd)


class _FadviseReader:
    """Drops the file's cached pages, then reads it; only clean pages can be dropped."""

    def __init__(self, block: int) -> None:
        self.buffer = bytearray(block)

    def read_file(self, name: str) -> int:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total, view = 0, memoryview(self.buffer)
            while True:
                got = os.readv(fd, [view])
                if got <= 0:
                    return total
                total += got
        finally:
            os.close(fd)
