"""Walk a dataset directory for the files a training job would read, and count what it passes over.

The walk is ``find -L PATH -type f -size +0 -readable`` in Python, with a sample spread over the tree:
- it follows symbolic links, as a DataLoader's ``open()`` does (a Hugging Face cache is
  ``snapshots/<rev>/file -> ../../blobs/<hash>``) and torchvision's ``ImageFolder`` walks
  (``os.walk(followlinks=True)``), and detects directory loops by device and inode, as
  find(1) does ("File system loop detected"): a link to a directory already walked, or to
  ``path`` or a directory above it, is not followed; a file reached twice (two links to one
  blob, hard links) is one sample;
- where a link leads, the walk goes, whatever filesystem it lands on: a file link is read
  where ``open()`` lands (DVC's ``symlink`` cache type links every file into a cache on
  another disk, treeverse/dvc#4520), and a *directory link* to another filesystem is walked,
  as the job's ``os.walk(followlinks=True)`` walks it (``train -> /mnt/nvme/train``). Each
  ``DataFile`` carries the ``device`` its bytes are on, so a caller measures the filesystem
  that holds them (``by_device``), not the one that holds the links;
- a *mount point* under ``path`` is descended too, as ``os.walk`` descends it: a class folder
  that is a second volume (a Kubernetes subPath, an NFS export mounted inside the dataset)
  holds samples the job reads (a walker that stops there reports a part of the dataset,
  shundhammer/qdirstat#64). Only pseudo filesystems no dataset lives on (proc, sysfs,
  devtmpfs, cgroup ..., ``fsinfo.PSEUDO``, their type read from /proc/self/mountinfo) are not
  descended, whether reached by a mount point or a link: they are counted (``pseudo_fs``), so
  a default of ``.`` run from ``/`` never wanders into /proc, /sys or /dev;
- a *hidden* entry (a name starting with ".") is not a sample, but the job's ``os.walk`` may
  read it (``.ipynb_checkpoints`` taken as a class, pytorch/vision#2831; macOS AppleDouble
  ``._x.jpg`` files that crash a decoder, hako-mikan/sd-webui-traintrain#26): each one is
  counted (``hidden``; a hidden directory counts once and is not walked) and the first few
  are named. preflight's own scratch directories (``SCRATCH_PREFIX``) and make-dataset's
  marker (``DATASET_MARKER``) are not the job's and are not counted;
- it spreads the files it takes over the tree, so that a walk stopped early is a sample of the
  dataset, not of its first directories (the first N rows of a sorted dataset are a biased
  sample, dotnet/machinelearning#3778): each directory's turn passes round its own files and
  its subdirectories, one data file from each in turn, recursively (a class folder of 10,000
  small files beside one of 400 large ones gives one of each until the second runs out), and
  a directory's sorted entries are taken in bit-reversed order (0, n/2, n/4, 3n/4, ...), so
  any prefix of them spans the directory. Two runs take the same files;
- it never stops on an entry it cannot use: an unreadable file or directory, a file that
  vanished between listing and ``stat``, a dangling link, a socket: each is counted by
  reason in ``Walk.skipped``, as find reports and goes on, so a report can say what the
  job would trip over;
- it is bounded: at most ``max_entries`` directory entries are looked at (``stat``), a
  directory keeps at most its share of them (``max_entries`` divided among the entries of
  each directory above it, evenly spaced over its sorted listing), so the walk's time and
  memory do not grow with the dataset (ImageNet has 1.28 M files), and it stops after
  ``seconds`` whatever the filesystem's metadata costs (an NFS or FUSE mount can take
  milliseconds per ``stat``): a check gives its walk a share of its timeout
  (``Budget.walk_s``), so it returns a figure on what was walked, not a timeout. A walk
  stopped by any of these, or by ``max_files`` (``Walk.take``), says so (``Walk.stopped``),
  and ``holds``, ``reached`` and ``note`` never claim more than was seen. A ``stat`` or listing that
  never returns (a hard mount whose server is gone) cannot be bounded from inside: the walk runs only
  in a check's worker process, never in the runner, which abandons a worker stuck in the kernel and
  names the path and mount (``runner.KILL_GRACE_S``, ``host.stuck``).
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
    """The data files under ``path`` (or ``path`` itself if it is a file), lazily.

    Iterate it once (or ``take`` from it); afterwards ``skipped`` counts the entries passed over
    by reason (keys of ``SKIPPED``), with the first few named in ``examples``, and ``stopped``
    says what stopped it before the end: "" (nothing), ``max_files`` (``take``), ``entries``
    (``max_entries``), ``time`` (``seconds``) or ``share`` (a folder larger than its share of
    ``max_entries`` was only sampled). Callers that stop iterating early themselves get counts
    that cover what was looked at.
    """

    def __init__(self, path: str, max_entries: int = 1 << 62, seconds: float = math.inf) -> None:
        self.path, self.max_entries, self.seconds = path, max_entries, seconds
        self.skipped: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}
        self.looked_at = 0
        self.stopped = ""
        self._seen: set[tuple[int, int]] = set()
        self._linked: set[tuple[int, int]] = set()  # files first counted through a symbolic link
        self._pseudo: dict[int, str] = {}  # st_dev: filesystem type, for devices met below another
        self._root: _Directory | None = None
        self._thinned = False  # a directory kept only its share of its entries
        self._deadline = math.inf

    @classmethod
    def for_files(cls, path: str, max_files: int, seconds: float = math.inf) -> Walk:
        """A walk for callers that want ``max_files`` data files: it looks at ``WALK_FACTOR`` times as
        many entries at most, and for ``seconds`` at most, so unreadable, skipped or non-matching entries
        and slow metadata cannot make it unbounded."""
        return cls(path, max_entries=max_files * WALK_FACTOR, seconds=seconds)

    @property
    def truncated(self) -> bool:
        """Whether the walk stopped before it had looked at everything under ``path``."""
        return bool(self.stopped)

    @property
    def timed_out(self) -> bool:
        return self.stopped == "time"

    def take(self, count: int, accept: Callable[[DataFile], bool] | None = None) -> list[DataFile]:
        """The first ``count`` data files the walk reaches that ``accept`` (all by default), in walk order.

        When it stops at ``count`` with entries left, ``stopped`` is ``max_files``: what follows (a
        figure on them, ``holds``) must say that the rest was not looked at.
        """
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
        """The next data file: down from ``root``, each directory on the way giving the turn to its next
        entry (its own files, or a subdirectory), which goes to the back of its queue once it gave a file.
        None when everything was looked at."""
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
        """The skipped entries in words ("60 unreadable files, 1 unreadable directory"), "" when none; with
        no ``reasons`` named, every reason, and where the walk stopped before the end."""
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
            exclude: str = "") -> tuple[list[DataFile], Walk]:
    """The data files under ``path`` a job would read (``Walk``), at most ``max_files`` of them, spread over the
    tree and matching the globs, and the walk (what it skipped, and whether it stopped early).

    ``include``/``exclude`` are comma-separated fnmatch globs tested against the path relative to ``path`` and
    against the file name ("*.jpg", "train/*").
    """
    includes = [g.strip() for g in include.split(",") if g.strip()] or ["*"]
    excludes = [g.strip() for g in exclude.split(",") if g.strip()]
    walk = Walk.for_files(path, max_files, seconds)

    def wanted(candidate: DataFile) -> bool:
        relative, name = os.path.relpath(candidate.name, path), os.path.basename(candidate.name)
        return _matches(relative, name, includes) and not _matches(relative, name, excludes)

    return walk.take(max_files, wanted), walk  # walk.stopped says when it stopped at max_files


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
    """``files`` grouped by the device that holds their bytes, the group with the most bytes first (each in
    walk order; equal groups in the order first met): a caller measures the first, where the bytes are."""
    groups: dict[int, list[DataFile]] = {}
    for found in files:
        groups.setdefault(found.device, []).append(found)
    return sorted(groups.values(), key=lambda group: -sum(f.size for f in group))


def filesystems(files: Sequence[DataFile]) -> str:
    """Where ``files`` lie when that is more than one filesystem, in words: " on 2 filesystems (850 on ext4 at
    /data/train/n002 (/dev/sdb, rw), 150 on ext4 at /data (/dev/sda, rw))"; "" for one."""
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
    """Why ``files`` are too few to stand for a dataset, or "" when they are enough.

    A figure over a handful of files re-reads the same few blocks (the device's and the
    hypervisor's caches hold them) and swings with how many stray files lie in a directory;
    it is not a dataset figure. Enough is ``MIN_SAMPLE_BYTES`` in ``MIN_SAMPLES`` files or
    more, or ``MIN_SHARD_BYTES`` in any number of files (a few large shards are a dataset).
    With ``samples``, the files are tar shards holding that many samples, and the samples count
    instead of the files (20 shards of 50 samples are 1,000 samples, not 20; issue 21, case 8).
    ``walk``, the walk ``files`` came from, says whether they are all of ``where`` (``Walk.holds``).
    """
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
