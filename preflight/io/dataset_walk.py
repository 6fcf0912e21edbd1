"""Walk a dataset directory for the files a training job would read, and count what it passes over.

The walk is ``find -L PATH -type f -size +0 -readable -not -path '*/.*'`` in Python, with
find's ``-xdev`` kept for mount points only:
- it follows symbolic links, as a DataLoader's ``open()`` does (a Hugging Face cache is
  ``snapshots/<rev>/file -> ../../blobs/<hash>``) and torchvision's ``ImageFolder`` walks
  (``os.walk(followlinks=True)``), and detects directory loops by device and inode, as
  find(1) does ("File system loop detected"): a link to a directory already walked, or to
  ``path`` or a directory above it, is not followed; a file reached twice (two links to one
  blob, hard links) is one sample;
- where a link leads, the walk goes, whatever filesystem it lands on: a file link is read
  where ``open()`` lands (DVC's ``symlink`` cache type links every file into a cache on
  another disk, treeverse/dvc#4520), and a *directory link* to another filesystem is walked,
  as the job's ``os.walk(followlinks=True)`` walks it (``train -> /mnt/nvme/train``): a link
  is how a dataset says where its data lies. Each ``DataFile`` carries the ``device`` its
  bytes are on, so a caller measures the filesystem that holds them (``by_device``), not the
  one that holds the links;
- a *mount point* under ``path`` (a plain directory whose ``st_dev`` differs from the
  directory that lists it) is not descended, as ``find -xdev`` and ``du -x`` do not descend
  it: a default of ``.`` run from ``/`` never wanders into /proc, /sys, /dev or another
  mount, and a scratch tmpfs mounted inside a dataset is not the dataset. It is counted
  (``other_fs``); point ``path`` at it to measure it. The walk also skips hidden entries
  (``.git``, ``.venv``, preflight's own scratch directories);
- it visits directories in sorted order, a directory's files before its subdirectories,
  so two runs see the same files;
- it never stops on an entry it cannot use: an unreadable file or directory, a file that
  vanished between listing and ``stat``, a dangling link, a socket: each is counted by
  reason in ``Walk.skipped``, as find reports and goes on, so a report can say what the
  job would trip over;
- it is bounded: at most ``max_entries`` directory entries are looked at, so the walk's
  time and memory do not grow with the dataset (ImageNet has 1.28 M files), and it stops
  after ``seconds`` whatever the filesystem's metadata costs (an NFS or FUSE mount can take
  milliseconds per ``stat``): a check gives its walk a share of its timeout
  (``Budget.walk_s``), so it returns a figure on what was walked, not a timeout.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import time
from collections import Counter
from typing import Iterator, NamedTuple, Sequence

from preflight.units import format_value

# Reasons an entry is not a sample, in the words reports use.
SKIPPED = {  # reason: (one, several)
    "unreadable": ("unreadable file", "unreadable files"),
    "unreadable_dir": ("unreadable directory", "unreadable directories"),
    "vanished": ("file vanished while walked", "files vanished while walked"),
    "special": ("special file (socket, FIFO, device)", "special files (sockets, FIFOs, devices)"),
    "empty": ("empty file", "empty files"),
    "dangling": ("dangling symbolic link", "dangling symbolic links"),
    "loop": ("directory loop", "directory loops"),
    "other_fs": ("mount point not descended (another filesystem)", "mount points not descended (other filesystems)"),
    "duplicate": ("second link to a file already counted", "second links to files already counted"),
}
UNREADABLE = ("unreadable", "unreadable_dir")

WALK_FACTOR = 4  # entries looked at per wanted file (``Walk.for_files``): skipped entries cannot unbound a walk
LOST = (FileNotFoundError, PermissionError)  # what reading a file raises when it vanished or turned unreadable since

MIN_SAMPLES = 100  # distinct files below which a file-based figure is a loop over a few files, not a dataset
MIN_SAMPLE_BYTES = 8 << 20
MIN_SHARD_BYTES = 64 << 20


class DataFile(NamedTuple):
    name: str  # the path as found under the walked directory (a link's own path when it is one)
    size: int  # bytes
    allocated: int = -1  # bytes allocated on disk (st_blocks x 512), -1 when unknown
    device: int = -1  # st_dev of the file open() reaches (a link's target), -1 when unknown

    @property
    def maybe_sparse(self) -> bool:
        """Fewer bytes allocated than the size: holes, or a compressing filesystem (see ``data_extents``)."""
        return 0 <= self.allocated < self.size


class Walk:
    """The data files under ``path`` (or ``path`` itself if it is a file), lazily.

    Iterate it once; afterwards ``skipped`` counts the entries passed over by reason (keys
    of ``SKIPPED``), ``truncated`` says whether ``max_entries`` or ``seconds`` stopped it and
    ``timed_out`` whether it was ``seconds``. Callers may stop early (``itertools.islice``);
    the counts then cover what was looked at.
    """

    def __init__(self, path: str, max_entries: int = 1 << 62, seconds: float = math.inf) -> None:
        self.path, self.max_entries, self.seconds = path, max_entries, seconds
        self.skipped: Counter[str] = Counter()
        self.looked_at = 0
        self.truncated = self.timed_out = False
        self._seen: set[tuple[int, int]] = set()

    @classmethod
    def for_files(cls, path: str, max_files: int, seconds: float = math.inf) -> Walk:
        """A walk for callers that want ``max_files`` data files: it looks at ``WALK_FACTOR`` times as
        many entries at most, and for ``seconds`` at most, so unreadable, skipped or non-matching entries
        and slow metadata cannot make it unbounded."""
        return cls(path, max_entries=max_files * WALK_FACTOR, seconds=seconds)

    def __iter__(self) -> Iterator[DataFile]:
        deadline = time.perf_counter() + self.seconds  # the clock runs while the caller works on a file, too
        try:
            top = os.stat(self.path)
        except OSError:
            return
        if not stat.S_ISDIR(top.st_mode):
            found = self._classify(self.path, top)
            if isinstance(found, DataFile):
                yield found
            return
        self._seen |= _ancestors(self.path)  # a link up the tree (loop -> ../..) would only walk it again
        pending = [(self.path, top.st_dev)]  # each directory with the device it lies on, for -xdev
        while pending:
            directory, device = pending.pop()
            subdirectories = []
            for name in self._list(directory):
                if self.looked_at >= self.max_entries or time.perf_counter() >= deadline:
                    self.truncated, self.timed_out = True, self.looked_at < self.max_entries
                    return
                self.looked_at += 1
                full = os.path.join(directory, name)
                found = self._entry(full, device)
                if isinstance(found, DataFile):
                    yield found
                elif isinstance(found, int):
                    subdirectories.append((full, found))
            pending.extend(reversed(subdirectories))

    def unreadable(self) -> int:
        """Files and directories the walk could not read (a job reading them would get PermissionError)."""
        return sum(self.skipped[reason] for reason in UNREADABLE)

    def summary(self, reasons: tuple[str, ...] = tuple(SKIPPED)) -> str:
        """The skipped entries in words ("60 unreadable files, 1 unreadable directory"), "" when none."""
        parts = [_plural(self.skipped[key], *SKIPPED[key]) for key in reasons if self.skipped[key]]
        if self.timed_out and reasons == tuple(SKIPPED):
            parts.append(f"walk cut short by its {self.seconds:g} s time limit after {self.looked_at} entries")
        elif self.truncated and reasons == tuple(SKIPPED):
            parts.append(f"walk stopped after {self.looked_at} entries")
        return ", ".join(parts)

    def _list(self, directory: str) -> list[str]:
        try:
            return sorted(name for name in os.listdir(directory) if not name.startswith("."))
        except FileNotFoundError:
            self.skipped["vanished"] += 1
        except OSError:
            self.skipped["unreadable_dir"] += 1
        return []

    def _entry(self, full: str, parent_device: int) -> DataFile | str | int:
        """A data file, the device of a directory to walk, or why the entry is skipped (a key of ``SKIPPED``)."""
        try:
            info = os.stat(full)  # follows links, as open() does
        except OSError as error:
            if error.errno == errno.ELOOP:
                return self._skip("loop")
            if error.errno == errno.ENOENT:
                return self._skip("dangling" if os.path.islink(full) else "vanished")
            return self._skip("unreadable")
        if stat.S_ISDIR(info.st_mode):
            if info.st_dev != parent_device and not os.path.islink(full):
                return self._skip("other_fs")  # a mount point: -xdev; a link to another filesystem is followed
            if (info.st_dev, info.st_ino) in self._seen:
                return self._skip("loop")
            self._seen.add((info.st_dev, info.st_ino))
            return info.st_dev
        return self._classify(full, info)

    def _classify(self, full: str, info: os.stat_result) -> DataFile | str:
        if not stat.S_ISREG(info.st_mode):
            return self._skip("special")
        if info.st_size == 0:
            return self._skip("empty")
        if (info.st_dev, info.st_ino) in self._seen:
            return self._skip("duplicate")
        self._seen.add((info.st_dev, info.st_ino))
        if not os.access(full, os.R_OK):
            return self._skip("unreadable")
        return DataFile(full, info.st_size, info.st_blocks * 512, info.st_dev)

    def _skip(self, reason: str) -> str:
        self.skipped[reason] += 1
        return reason


def _ancestors(path: str) -> set[tuple[int, int]]:
    """(device, inode) of ``path`` and every directory above it."""
    found, current = set(), os.path.realpath(path)
    while True:
        info = os.stat(current)
        found.add((info.st_dev, info.st_ino))
        parent = os.path.dirname(current)
        if parent == current:
            return found
        current = parent


def by_device(files: Sequence[DataFile]) -> list[list[DataFile]]:
    """``files`` grouped by the device that holds their bytes, the group with the most bytes first (each in
    walk order; equal groups in the order first met): a caller measures the first, where the bytes are."""
    groups: dict[int, list[DataFile]] = {}
    for found in files:
        groups.setdefault(found.device, []).append(found)
    return sorted(groups.values(), key=lambda group: -sum(f.size for f in group))


def too_few(files: list[DataFile], where: str, samples: int | None = None) -> str:
    """Why ``files`` are too few to stand for a dataset, or "" when they are enough.

    A figure over a handful of files re-reads the same few blocks (the device's and the
    hypervisor's caches hold them) and swings with how many stray files lie in a directory;
    it is not a dataset figure. Enough is ``MIN_SAMPLE_BYTES`` in ``MIN_SAMPLES`` files or
    more, or ``MIN_SHARD_BYTES`` in any number of files (a few large shards are a dataset).
    With ``samples``, the files are tar shards holding that many samples, and the samples count
    instead of the files (20 shards of 50 samples are 1,000 samples, not 20; issue 21, case 8).
    """
    total = sum(f.size for f in files)
    count = len(files) if samples is None else samples
    if total >= MIN_SHARD_BYTES or (count >= MIN_SAMPLES and total >= MIN_SAMPLE_BYTES):
        return ""
    if samples is not None:
        return (f"{where} holds {_plural(len(files), 'tar shard', 'tar shards')} "
                f"({format_value(total / 1e6, 'MB')}) of {_plural(samples, 'sample', 'samples')}, under the "
                f"{MIN_SAMPLES} samples and {MIN_SAMPLE_BYTES >> 20} MiB (or {MIN_SHARD_BYTES >> 20} MiB of shards) "
                f"a dataset figure needs")
    return (f"{where} holds {describe_files(files)}, under the {MIN_SAMPLES} files and {MIN_SAMPLE_BYTES >> 20} MiB "
            f"(or {MIN_SHARD_BYTES >> 20} MiB of shards) a dataset figure needs")


def describe_files(files: Sequence[DataFile]) -> str:
    """``files`` in words: "192 data files (1.36 MB)" (1 MB = 10^6 B)."""
    return f"{_plural(len(files), 'data file', 'data files')} ({format_value(sum(f.size for f in files) / 1e6, 'MB')})"


def data_extents(name: str, size: int) -> list[tuple[int, int]]:
    """The (offset, length) byte ranges of ``name`` that hold data, holes left out.

    Uses ``lseek(SEEK_DATA/SEEK_HOLE)`` (lseek(2); what ``cp --sparse`` and fio's
    ``--file_service`` rely on). A filesystem without hole support reports the whole file
    as data. Raises OSError when ``name`` cannot be opened.
    """
    fd = os.open(name, os.O_RDONLY)
    try:
        extents, offset = [], 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:  # only a hole remains
                    break
                return [(0, size)]  # no SEEK_DATA here: all of it is data
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            extents.append((start, end - start))
            offset = end
        return extents
    finally:
        os.close(fd)


def _plural(count: int, one: str, several: str) -> str:
    return f"{count} {one if count == 1 else several}"
