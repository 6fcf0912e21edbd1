"""The run's dataset: one pass over its files, each read at most once across checks, pools and processes.

A job's first epoch touches each sample once. A gate that reads a file twice measures, the second time,
whatever cache holds it, and where a cache sits below the page cache (a FUSE client's own, NFS, Lustre)
neither O_DIRECT nor fadvise reaches it: the job's first epoch is 8-15x slower than such a figure. So the
runner makes one ``Dataset`` per run and hands it to every check through ``Budget``; every open of a
dataset file goes through one opener (``io.uncached``), which records it here, and a reader asks for the
files not read yet (``fresh``, ``take``). Failures to read or decode are recorded too, whichever check met
them. The long story: docs/checks.md "How a run reads the data".

The record is a file (the ledger) that every process of the run appends to with O_APPEND: one ``write``
of a line shorter than PIPE_BUF is atomic, so DataLoader workers and storage loops never interleave. Each
process reads it incrementally, from where it last stopped, so a window's cost does not grow with the
files read before it.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import tempfile
import weakref
from typing import Callable, Iterator, Sequence, TypeVar

from preflight.io import residency
from preflight.io.dataset_walk import DataFile, Walk, listing

SHARE, MIN_SHARE = 0.1, 25  # of a dataset's files, what one storage part may read (``Dataset.share``)
LATER_SHARES = 2  # shares an undecided part leaves unread for the readers after it (``Dataset.further``)
WARM = "warm: "  # how a row read twice begins to say so (``warm_note``)

Named = TypeVar("Named")


class Spent(Exception):
    """The files a reader may read once are all read: its sampling stops here, with this reason."""


class Dataset:
    """One run's pass over the dataset: what was opened, what failed, and which files are still unread.

    Pickles as its ledger's path, so a DataLoader worker started by spawn records into the same run.
    """

    def __init__(self, ledger: str) -> None:
        self.ledger = ledger
        self.reader = ""  # the check instance reading now, named with each failure it records
        self._reset()

    def _reset(self) -> None:
        self._listed: dict[tuple[str, int, float, str, str, tuple[str, ...]], tuple[list[DataFile], Walk]] = {}
        self._pid = os.getpid()
        self._append: int | None = None  # this process's O_APPEND descriptor of the ledger
        self._opened: collections.Counter[str] = collections.Counter()
        self._read_to = 0  # bytes of the ledger counted into ``_opened``
        self._failed: dict[str, tuple[str, str]] = {}  # name -> (why, the instance that met it first)
        self._failed_to = 0
        self._written_back: set[int] = set()  # st_dev of each filesystem synced in this process

    def __getstate__(self) -> tuple[str, str]:
        return self.ledger, self.reader

    def __setstate__(self, state: tuple[str, str]) -> None:
        self.ledger, self.reader = state
        self._reset()

    def _own(self) -> None:
        """A forked child starts its own descriptor and reading; it inherits the parent's counts, which hold."""
        if self._pid != os.getpid():
            self._pid, self._append = os.getpid(), None

    @classmethod
    @contextlib.contextmanager
    def started(cls, temp_dir: str) -> Iterator[Dataset]:
        """A run's dataset, its ledger a fresh file in ``temp_dir``, removed afterwards."""
        dataset = cls(_new_ledger(temp_dir))
        try:
            yield dataset
        finally:
            dataset.close()

    @classmethod
    def attached(cls, ledger: str) -> Dataset:
        """The run's dataset in a worker process, one object per ledger for the process's life: the checks it
        runs in turn share its listings and its reading of the ledger."""
        if ledger not in _ATTACHED:
            _ATTACHED[ledger] = cls(ledger)
        return _ATTACHED[ledger]

    @classmethod
    def private(cls) -> Dataset:
        """A dataset of its own for a check measured outside a run (a bench, a test): its ledger lies in the
        temporary directory ``io.tempdir`` chooses and goes when the object does."""
        from preflight.io import tempdir

        dataset = cls(_new_ledger(tempdir.choose()))
        weakref.finalize(dataset, _remove, dataset.ledger)
        return dataset

    def share_with(self, uid: int, gid: int) -> None:
        """Let a worker running as ``uid``/``gid`` (the job's user) append to the ledger and its failures too."""
        for path in (self.ledger, self.ledger + ".failed"):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            os.chown(path, uid, gid)

    def close(self) -> None:
        """Close this process's descriptor and remove the ledger."""
        if self._append is not None and self._pid == os.getpid():
            os.close(self._append)
        self._append = None
        _remove(self.ledger)

    def files(self, path: str, max_files: int, seconds: float = math.inf, include: str = "*",
              exclude: str = "", extensions: tuple[str, ...] = ()) -> tuple[list[DataFile], Walk]:
        """The files under ``path`` the job would read (``dataset_walk.listing``), walked once for each such request
        in this process: checks and phases that ask again get the same list."""
        key = (path, max_files, seconds, include, exclude, extensions)
        if key not in self._listed:
            self._listed[key] = listing(path, max_files, seconds, include, exclude, extensions)
        files, walk = self._listed[key]
        return list(files), walk

    def written_back(self, name: str) -> None:
        """Write back the dirty pages of ``name``'s filesystem (``residency.written_back``) once per filesystem in
        this process: posix_fadvise(DONTNEED) drops clean pages only, and on a network mount each syncfs is a round
        trip. Nothing where ``name`` cannot be stat'ed (its reader then says why)."""
        try:
            device = os.stat(name).st_dev
        except OSError:
            return
        if device not in self._written_back:
            self._written_back.add(device)
            residency.written_back(name)

    def record(self, name: str) -> None:
        """Note that ``name`` was opened for reading (one atomic append); never raises for the ledger."""
        self._own()
        try:
            if self._append is None:
                self._append = os.open(self.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.write(self._append, name.encode("utf-8", "surrogateescape") + b"\n")
        except OSError:
            pass  # a full or vanished temp dir must not stop a measurement: the pass then under-counts touches

    def record_failure(self, name: str, why: str) -> None:
        """Note that reading (or decoding) ``name`` failed with ``why`` ("cannot be read: [Errno 5] ..."), as the
        job's worker would have raised there; ``failures`` reads them back, whichever process met them."""
        line = f"{name}\t{why}\t{self.reader}".replace("\n", " ").encode("utf-8", "surrogateescape")[:3000] + b"\n"
        try:
            fd = os.open(self.ledger + ".failed", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError:
            pass  # as ``record``: the ledger is never the measurement's failure

    def failures(self, names: Sequence[str] | None = None, by: str | None = None) -> dict[str, str]:
        """The files whose reads failed in this run and why (the first reason each), of ``names`` when given, met by
        the check instance ``by`` when given."""
        found = {name: why for name, (why, reader) in self._failures().items() if by is None or reader == by}
        if names is None:
            return found
        return {name: found[name] for name in dict.fromkeys(names) if name in found}

    def failures_under(self, path: str) -> dict[str, tuple[str, str]]:
        """The files under ``path`` whose reads failed in this run: name -> (why, the check instance that met it
        first), whichever check read them: the dataset's faults are the run's (issue 43)."""
        root = os.path.abspath(path)
        return {name: met for name, met in self._failures().items()
                if os.path.abspath(name) == root or os.path.abspath(name).startswith(root.rstrip(os.sep) + os.sep)}

    def _failures(self) -> dict[str, tuple[str, str]]:
        for line in self._new_lines(self.ledger + ".failed", "_failed_to"):
            name, _, rest = line.partition("\t")
            why, _, reader = rest.partition("\t")
            self._failed.setdefault(name, (why, reader))
        return self._failed

    def opened(self) -> collections.Counter[str]:
        """How many times each file was opened in this run so far (a copy: ``mark`` is the cheap way to compare)."""
        return collections.Counter(self._counts())

    def mark(self) -> int:
        """Where the ledger stands now, for ``unread_since``."""
        self._counts()
        return self._read_to

    def fresh(self, items: Sequence[Named], name: Callable[[Named], str] = str) -> list[Named]:  # type: ignore[assignment]
        """Those of ``items`` whose file (``name(item)``) was not opened yet in this run, in their order."""
        touched = self._counts()
        return [item for item in items if name(item) not in touched]

    def share(self, items: Sequence[Named], of: int, name: Callable[[Named], str] = str) -> list[Named]:  # type: ignore[assignment]
        """The first of ``items`` not yet read, at most a ``SHARE`` of ``of`` (the dataset's files found) but never
        fewer than ``MIN_SHARE``: a storage part leaves the rest of a small dataset to the readers after it, so each
        of them still reads first touches (the DataLoader's included)."""
        return self.fresh(items, name)[:max(MIN_SHARE, int(of * SHARE))]

    def further(self, items: Sequence[Named], of: int, name: Callable[[Named], str] = str) -> list[Named]:  # type: ignore[assignment]
        """A further ``share`` for a part still undecided, or none where taking it would leave fewer than
        ``LATER_SHARES`` shares, or under half of ``of``, unread: a part measured on cannot spend the first touches
        its later siblings and the DataLoader need."""
        unread, size = self.fresh(items, name), max(MIN_SHARE, int(of * SHARE))
        return unread[:size] if len(unread) - size >= max(LATER_SHARES * size, of // 2) else []

    def touched_count(self, names: Sequence[str]) -> int:
        """How many of ``names`` were read in this run so far."""
        touched = self._counts()
        return sum(1 for n in names if n in touched)

    def unread_since(self, items: Sequence[Named], mark: int,
                     name: Callable[[Named], str] = str) -> list[Named]:  # type: ignore[assignment]
        """Those of ``items`` not opened again since ``mark`` (``Dataset.mark``), in their order; the cost is the
        lines appended since, not the ledger's length."""
        again = set()
        with contextlib.suppress(OSError), open(self.ledger, "rb") as handle:
            handle.seek(mark)
            tail = handle.read()
            again = set(_lines(tail[:tail.rfind(b"\n") + 1]))
        self._counts()
        return [item for item in items if name(item) not in again]

    def _counts(self) -> collections.Counter[str]:
        self._own()
        self._opened.update(self._new_lines(self.ledger, "_read_to"))
        return self._opened

    def _new_lines(self, path: str, offset: str) -> list[str]:
        """The whole lines appended to ``path`` since the byte offset held in attribute ``offset``, which moves on."""
        try:
            with open(path, "rb") as handle:
                handle.seek(getattr(self, offset))
                tail = handle.read()
        except OSError:
            return []
        whole = tail[:tail.rfind(b"\n") + 1]  # a line being written by another process waits for the next read
        setattr(self, offset, getattr(self, offset) + len(whole))
        return _lines(whole)


_ATTACHED: dict[str, Dataset] = {}  # ``Dataset.attached``: the worker process's dataset of each run


def warm_note(reread: int, of: int) -> str:
    """What a row read twice says: "" when nothing was re-read."""
    if not reread:
        return ""
    return (f"{WARM}{reread} of {of} files read a second time in this run (the first pass was spent), so a cache "
            f"can serve them")


def failures_note(failed: dict[str, str], of: int, decoded_of: int | None = None) -> str:
    """"5 of 1000 files cannot be read: /data/a.jpg, ...", one clause per reason's kind; "" for none.

    ``decoded_of``: how many files were decoded, where fewer than ``of`` were (the raw phase of ``decode: image``
    reads its half undecoded): the decode clause counts among those, and says so."""
    clauses = []
    for kind in ("cannot be read", "cannot be decoded"):
        names = sorted(name for name, why in failed.items() if why.startswith(kind))
        if names:
            first = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            example = failed[names[0]][len(kind):].lstrip(": ")
            among = (f"of the {decoded_of} files decoded (the raw-read half is not)"
                     if kind == "cannot be decoded" and decoded_of is not None and decoded_of < of else f"of {of} files")
            clauses.append(f"{len(names)} {among} {kind}: {first} ({example})")
    return "; ".join(clauses)


def _lines(data: bytes) -> list[str]:
    return [line.decode("utf-8", "surrogateescape") for line in data.splitlines()]


def _new_ledger(directory: str) -> str:
    handle, path = tempfile.mkstemp(prefix="preflight-pass-", suffix=".log", dir=directory)
    os.close(handle)
    return path


def _remove(ledger: str) -> None:
    for leftover in (ledger, ledger + ".failed"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)
