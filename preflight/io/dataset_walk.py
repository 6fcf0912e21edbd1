"""Walk a dataset directory for the files a training job would read, and count what it passes over (io layer).

``find -L PATH -type f -size +0 -readable`` in Python, links followed as ``os.walk(followlinks=True)`` does, loops
caught by device and inode (find(1)), unusable entries counted by reason. Bounded (``max_entries``, ``seconds``) and
spread over the tree so that a walk stopped early samples the whole dataset (dotnet/machinelearning#3778). It runs
only in a check's worker: a ``stat`` on a dead mount cannot be bounded from inside. docs/checks.md.
"""

from __future__ import annotations

import errno
import fnmatch
import math
import os
import stat
import time
from collections import Counter, deque
from typing import Callable, Iterator, NamedTuple, Sequence

from preflight.host.fsinfo import filesystem_of
from preflight.units import format_value

SCRATCH_PREFIX = ".preflight-scratch-"  # preflight's own scratch directories (``io.scratch``): never the job's
DATASET_MARKER = ".preflight-dataset.json"  # what ``preflight make-dataset`` writes beside the samples it makes

# Reasons an entry is not a sample, in the words reports use; a note in brackets takes the first examples.
SKIPPED = {  # reason: (one, several)
    "unreadable": ("unreadable file", "unreadable files"),
    "unreadable_dir": ("unreadable directory", "unreadable directories"),
    "vanished": ("file vanished while walked", "files vanished while walked"),
    "special": ("special file (socket, FIFO, device)", "special files (sockets, FIFOs, devices)"),
    "empty": ("empty file", "empty files"),
    "dangling": ("dangling symbolic link", "dangling symbolic links"),
    "loop": ("directory loop", "directory loops"),
    "pseudo_fs": ("pseudo filesystem not descended (no dataset lives on it)",
                  "pseudo filesystems not descended (no dataset lives on them)"),
    # One file reached by two paths is one sample; which words say it depends on the paths (issue 25).
    "hard_link": ("hard link to a file already counted", "hard links to files already counted"),
    "symlink_duplicate": ("symbolic link to a file already counted", "symbolic links to files already counted"),
    "linked_duplicate": ("file already counted through a symbolic link", "files already counted through symbolic links"),
    "hidden": ("hidden file or directory, not read (the job's os.walk may read it)",
               "hidden files or directories, not read (the job's os.walk may read them)"),
}
UNREADABLE = ("unreadable", "unreadable_dir")
# What a folder dataset of images lists: torchvision's ImageFolder (``IMG_EXTENSIONS``), matched in any case, as
# its ``has_file_allowed_extension`` does; a tag, caption or label file beside the images is no sample of it.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
EXAMPLES = 3  # entries named per reason

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


class _Directory:
    """A directory being walked: its own entries not yet looked at, and whose turn comes next."""

    __slots__ = ("path", "device", "share", "names", "turns", "child_share")

    def __init__(self, path: str, device: int, share: int) -> None:
        self.path, self.device, self.share = path, device, share  # share: names it may keep from its listing
        self.names: deque[str] | None = None  # None until listed; then its entries in the order they are taken
        self.turns: deque[_Directory | None] = deque()  # None: its own entries' turn; else a subdirectory's
        self.child_share = 1


class _Stopped(Exception):
    """The walk reached ``max_entries`` or its time limit."""


class Walk:
    """The data files under ``path`` (or ``path`` itself if it is a file), lazily. Iterate it once (or ``take``); then
    ``skipped`` counts the entries passed over by reason (``SKIPPED``, first few in ``examples``) and ``stopped`` says
    what ended it early: "", ``max_files``, ``entries``, ``time`` or ``share``."""

    def __init__(self, path: str, max_entries: int = 1 << 62, seconds: float = math.inf) -> None:
        self.path, self.max_entries, self.seconds = path, max_entries, seconds
        self.skipped: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}
        self.looked_at = 0
        self.left_out: Counter[str] = Counter()  # data files ``listing`` did not take, by extension ("" for none)
        self.stopped = ""
        self._seen: set[tuple[int, int]] = set()
        self._linked: set[tuple[int, int]] = set()  # files first counted through a symbolic link
        self._pseudo: dict[int, str] = {}  # st_dev: filesystem type, for devices met below another
        self._root: _Directory | None = None
        self._thinned = False  # a directory kept only its share of its entries
        self._deadline = math.inf

    @classmethod
    def for_files(cls, path: str, max_files: int, seconds: float = math.inf) -> Walk:
        """A walk for ``max_files`` data files: at most ``WALK_FACTOR`` times as many entries and ``seconds``, so
        skipped entries and slow metadata cannot make it unbounded."""
        return cls(path, max_entries=max_files * WALK_FACTOR, seconds=seconds)

    @property
    def truncated(self) -> bool:
        """Whether the walk stopped before it had looked at everything under ``path``."""
        return bool(self.stopped)

    @property
    def timed_out(self) -> bool:
        return self.stopped == "time"

    def take(self, count: int, accept: Callable[[DataFile], bool] | None = None) -> list[DataFile]:
        """The first ``count`` data files the walk reaches that ``accept`` (all by default), in walk order; stopping
        there with entries left sets ``stopped`` to ``max_files``."""
        taken: list[DataFile] = []
        files = iter(self)
        for found in files:
            if accept is None or accept(found):
                taken.append(found)
                if len(taken) >= count:
                    if self._more():
                        self.stopped = "max_files"
                    break
        files.close()
        return taken

    def __iter__(self) -> Iterator[DataFile]:
        self._deadline = time.perf_counter() + self.seconds  # the clock runs while the caller works on a file, too
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
        self._root = _Directory(self.path, top.st_dev, self.max_entries)
        try:
            while (found := self._next(self._root)) is not None:
                yield found
        except _Stopped:
            return
        if self._thinned:
            self.stopped = "share"  # entries beyond a directory's share were never looked at

    def _next(self, root: _Directory) -> DataFile | None:
        """The next data file down from ``root``, each directory on the way giving the turn to its next entry, which
        then goes to the back of its queue; None when everything was looked at."""
        way = [root]
        while way:
            directory = way[-1]
            if directory.names is None:
                self._list(directory)
            if not directory.turns:  # nothing left in it: its parent passes the turn on
                way.pop()
                if way:
                    way[-1].turns.popleft()
                continue
            turn = directory.turns[0]
            if turn is not None:
                way.append(turn)
                continue
            found = self._own(directory)
            if found is None:
                directory.turns.popleft()
                continue
            for passed in way:
                passed.turns.rotate(-1)
            return found
        return None

    def _own(self, directory: _Directory) -> DataFile | None:
        """The next data file among ``directory``'s own entries; subdirectories met on the way join its turns."""
        names = directory.names
        while names:
            full = os.path.join(directory.path, names.popleft())
            found = self._entry(full, directory)
            if isinstance(found, DataFile):
                return found
            if isinstance(found, _Directory):
                directory.turns.append(found)
        return None

    def _list(self, directory: _Directory) -> None:
        """``directory``'s entries in taking order, hidden ones counted, at most its share of them kept."""
        directory.names = deque()
        try:
            listed = sorted(os.listdir(directory.path))
        except FileNotFoundError:
            self.skipped["vanished"] += 1
            return
        except OSError:
            self.skipped["unreadable_dir"] += 1
            return
        names = [name for name in listed if not self._hidden(directory.path, name)]
        if len(names) > directory.share:  # evenly spaced over the listing: memory stays bounded
            names = [names[i * len(names) // directory.share] for i in range(directory.share)]
            self._thinned = True
        directory.names.extend(names[i] for i in _spread(len(names)))
        directory.turns.append(None)
        directory.child_share = max(1, directory.share // max(1, len(names)))

    def _hidden(self, directory: str, name: str) -> bool:
        """Whether ``name`` is hidden; counted unless it is preflight's own."""
        if not name.startswith("."):
            return False
        if not (name.startswith(SCRATCH_PREFIX) or name == DATASET_MARKER):
            self._skip("hidden", os.path.relpath(os.path.join(directory, name), self.path))
        return True

    def _more(self) -> bool:
        """Whether entries are left that the walk has not looked at."""
        if self._thinned:
            return True
        pending = [self._root] if self._root else []
        while pending:
            directory = pending.pop()
            if directory.names is None or directory.names:
                return True
            pending.extend(turn for turn in directory.turns if turn is not None)
        return False

    def _look(self) -> None:
        """Count one more entry looked at, or stop the walk at its limit on entries or time."""
        if self.looked_at >= self.max_entries or time.perf_counter() >= self._deadline:
            self.stopped = "entries" if self.looked_at >= self.max_entries else "time"
            raise _Stopped
        self.looked_at += 1

    def _entry(self, full: str, parent: _Directory) -> DataFile | _Directory | str:
        """A data file, a directory to walk, or why the entry is skipped (a key of ``SKIPPED``)."""
        self._look()
        try:
            info = os.stat(full)  # follows links, as open() does
        except OSError as error:
            if error.errno == errno.ELOOP:
                return self._skip("loop")
            if error.errno == errno.ENOENT:
                return self._skip("dangling" if os.path.islink(full) else "vanished")
            return self._skip("unreadable")
        if not stat.S_ISDIR(info.st_mode):
            return self._classify(full, info)
        if info.st_dev != parent.device:  # a mount point, or a link to another filesystem: walked unless pseudo
            fstype = self._pseudo_type(full, info.st_dev)
            if fstype:
                return self._skip("pseudo_fs", f"{fstype} at {os.path.relpath(full, self.path)}")
        if (info.st_dev, info.st_ino) in self._seen:
            return self._skip("loop")
        self._seen.add((info.st_dev, info.st_ino))
        return _Directory(full, info.st_dev, parent.child_share)

    def _pseudo_type(self, directory: str, device: int) -> str:
        """The type of the pseudo filesystem (proc, sysfs ...) ``directory`` is on, or "" when it may hold data."""
        if device not in self._pseudo:
            try:
                fs = filesystem_of(directory)
            except OSError:
                return ""
            self._pseudo[device] = fs.fstype if fs.pseudo else ""
        return self._pseudo[device]

    def _classify(self, full: str, info: os.stat_result) -> DataFile | str:
        if not stat.S_ISREG(info.st_mode):
            return self._skip("special")
        if info.st_size == 0:
            return self._skip("empty")
        identity = (info.st_dev, info.st_ino)
        if identity in self._seen:
            if os.path.islink(full):
                return self._skip("symlink_duplicate")
            return self._skip("linked_duplicate" if identity in self._linked else "hard_link")
        self._seen.add(identity)
        if os.path.islink(full):
            self._linked.add(identity)
        if not os.access(full, os.R_OK):
            return self._skip("unreadable")
        return DataFile(full, info.st_size, info.st_blocks * 512, info.st_dev)

    def _skip(self, reason: str, example: str = "") -> str:
        self.skipped[reason] += 1
        if example and len(named := self.examples.setdefault(reason, [])) < EXAMPLES:
            named.append(example)
        return reason

    def unreadable(self) -> int:
        """Files and directories the walk could not read (a job reading them would get PermissionError)."""
        return sum(self.skipped[reason] for reason in UNREADABLE)

    def summary(self, reasons: Sequence[str] | None = None) -> str:
        """The skipped entries in words ("60 unreadable files, 1 unreadable directory"), "" when none; without
        ``reasons``, every reason and where the walk stopped early."""
        parts = [self._counted(key) for key in (reasons or SKIPPED) if self.skipped[key]]
        if reasons is None and self.stopped:
            looked = self.looked_at
            parts.append({"time": f"walk cut short by its {self.seconds:g} s time limit after {looked} entries",
                          "entries": f"walk stopped at its limit on entries after {looked} entries",
                          "share": f"walk looked at {looked} entries, an evenly spaced share of each folder larger "
                                   f"than its part of the limit on entries",
                          "max_files": f"walk stopped at max_files after {looked} entries"}[self.stopped]
                         + ", the rest was not looked at")
        return ", ".join(parts)

    def _counted(self, reason: str) -> str:
        """"2 hidden files or directories, not read (the job's os.walk may read them: .git, a/._x.jpg)"."""
        words = _plural(self.skipped[reason], *SKIPPED[reason])
        named = self.examples.get(reason)
        if not named:
            return words
        listed = ", ".join(named) + (", ..." if self.skipped[reason] > len(named) else "")
        return words[:-1] + f": {listed})" if words.endswith(")") else f"{words} ({listed})"

    def cut(self) -> str:
        """Why the walk stopped before the end, "" when it did not: "it stopped at max_files, the rest ..."."""
        if not self.stopped:
            return ""
        return {"time": f"it stopped at its {self.seconds:g} s time limit",
                "entries": f"it stopped at its limit of {self.max_entries} entries",
                "share": f"it took an evenly spaced share of each folder larger than its part of the limit of "
                         f"{self.max_entries} entries (divided evenly among the folders at each level, whatever their "
                         f"size)",
                "max_files": "it stopped at max_files"}[self.stopped] + ", the rest was not looked at"

    def reached(self, files: Sequence[DataFile], where: str) -> str:
        """For a figure built on ``files`` from this walk: that they are not all of ``where``; "" when they are."""
        if not self.stopped:
            return ""
        return f"the first {describe_files(files)} the walk reached under {where}; {self.cut()}"

    def holds(self, files: Sequence[DataFile], where: str, noun: str = "data file") -> str:
        """What ``files`` (from this walk) say ``where`` holds: all of it, or only what the walk reached."""
        if not self.stopped:
            return f"{where} holds {describe_files(files, noun)}"
        return f"the first {describe_files(files, noun)} the walk reached under {where} ({self.cut()})"

    def note(self, files: Sequence[DataFile], where: str) -> str:
        """What a figure on ``files`` must say about this walk: that it stopped early, and what it skipped."""
        skipped = self.summary(tuple(SKIPPED))
        return "; ".join(part for part in (self.reached(files, where),
                                           f"skipped under {where}: {skipped}" if skipped else "") if part)


def listing(path: str, max_files: int, seconds: float = math.inf, include: str = "*",
            exclude: str = "", extensions: tuple[str, ...] = ()) -> tuple[list[DataFile], Walk]:
    """The data files under ``path`` a job would read, at most ``max_files`` matching ``include`` and not ``exclude``
    (comma-separated fnmatch globs on the relative path and the name) and, when given, ending in one of
    ``extensions`` in any case (``IMAGE_EXTENSIONS``), and the ``Walk``, whose ``left_out`` counts the others."""
    includes = [g.strip() for g in include.split(",") if g.strip()] or ["*"]
    excludes = [g.strip() for g in exclude.split(",") if g.strip()]
    walk = Walk.for_files(path, max_files, seconds)

    def wanted(candidate: DataFile) -> bool:
        relative, name = os.path.relpath(candidate.name, path), os.path.basename(candidate.name)
        taken = (_matches(relative, name, includes) and not _matches(relative, name, excludes)
                 and (not extensions or name.lower().endswith(extensions)))
        if not taken:
            walk.left_out[extension(name)] += 1
        return taken

    return walk.take(max_files, wanted), walk  # walk.stopped says when it stopped at max_files


def extension(name: str) -> str:
    """``name``'s extension as written, with its dot; "" for none (a dot file's name is no extension)."""
    stem, dot, suffix = name.rpartition(".")
    return f".{suffix}" if dot and stem else ""


def left_out(walk: Walk) -> str:
    """The files ``listing`` did not take, in numbers by extension: "150 files (.txt: 150)", "" for none."""
    if not walk.left_out:
        return ""
    kinds = sorted(walk.left_out.items(), key=lambda item: (-item[1], item[0]))
    named = ", ".join(f"{kind or 'no extension'}: {count:,}" for kind, count in kinds[:EXAMPLES + 1])
    total = sum(walk.left_out.values())
    return f"{_plural(total, 'file', 'files')} ({named}{', ...' if len(kinds) > EXAMPLES + 1 else ''})"


def _matches(relative: str, name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatch(relative, g) or fnmatch.fnmatch(name, g) for g in globs)


def _spread(count: int) -> list[int]:
    """0 .. count-1 in bit-reversed order (0, n/2, n/4, 3n/4, ...: van der Corput): any prefix spans them all."""
    bits = max(count - 1, 0).bit_length()
    if bits == 0:
        return list(range(count))
    return [i for i in (int(format(j, f"0{bits}b")[::-1], 2) for j in range(1 << bits)) if i < count]


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
    """``files`` grouped by the device that holds their bytes, most bytes first (equal groups in the order met): a
    caller measures the first."""
    groups: dict[int, list[DataFile]] = {}
    for found in files:
        groups.setdefault(found.device, []).append(found)
    return sorted(groups.values(), key=lambda group: -sum(f.size for f in group))


def filesystems(files: Sequence[DataFile]) -> str:
    """Where ``files`` lie when that is more than one filesystem, in words (" on 2 filesystems (850 on ext4 at ...,
    150 on ...)"); "" for one."""
    groups = by_device(files)
    if len(groups) < 2:
        return ""
    named = []
    for group in groups:
        try:
            named.append(f"{len(group)} on {filesystem_of(group[0].name).describe()}")
        except OSError:  # deleted since the walk
            named.append(f"{len(group)} on device {group[0].device}")
    return f" on {len(groups)} filesystems ({', '.join(named)})"


def too_few(files: list[DataFile], where: str, *, samples: int | None = None, walk: Walk | None = None) -> str:
    """Why ``files`` are too few to stand for a dataset (re-reads of a few cached blocks), "" when they are at least
    ``MIN_SAMPLE_BYTES`` in ``MIN_SAMPLES`` files or ``MIN_SHARD_BYTES``. With ``samples``, tar shards' samples count
    (issue 21, case 8); ``walk`` says whether ``files`` are all of ``where``."""
    total = sum(f.size for f in files)
    count = len(files) if samples is None else samples
    if total >= MIN_SHARD_BYTES or (count >= MIN_SAMPLES and total >= MIN_SAMPLE_BYTES):
        return ""
    noun = "data file" if samples is None else "tar shard"
    seen = walk.holds(files, where, noun) if walk else f"{where} holds {describe_files(files, noun)}"
    if samples is not None:
        return (f"{seen} of {_plural(samples, 'sample', 'samples')}, under the {MIN_SAMPLES} samples and "
                f"{MIN_SAMPLE_BYTES >> 20} MiB (or {MIN_SHARD_BYTES >> 20} MiB of shards) a dataset figure needs")
    return (f"{seen}, under the {MIN_SAMPLES} files and {MIN_SAMPLE_BYTES >> 20} MiB "
            f"(or {MIN_SHARD_BYTES >> 20} MiB of shards) a dataset figure needs")


def describe_files(files: Sequence[DataFile], noun: str = "data file") -> str:
    """``files`` in words: "192 data files (1.36 MB)" (1 MB = 10^6 B); ``noun`` names one ("tar shard")."""
    return f"{_plural(len(files), noun, noun + 's')} ({format_value(sum(f.size for f in files) / 1e6, 'MB')})"


def data_extents(name: str, size: int) -> list[tuple[int, int]]:
    """The (offset, length) byte ranges of ``name`` that hold data, holes left out (lseek(2)
    ``SEEK_DATA``/``SEEK_HOLE``, as ``cp --sparse``); the whole file where holes are not supported.

    Raises:
        OSError: ``name`` cannot be opened.
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
