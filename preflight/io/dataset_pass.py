"""One pass over the dataset per run: each file read at most once, as the job's cold first epoch reads it.

A job's first epoch touches each sample once. A gate that reads the same file twice (a warm-up then
windows, a fresh worker pool, storage then DataLoader) measures, the second time, whatever cache holds
it, and where a cache sits below the page cache (a FUSE client's own cache: s3fs, gcsfuse, Alluxio,
JuiceFS; NFS, CIFS and Lustre clients) neither O_DIRECT nor fadvise DONTNEED can reach it: the second
touch is served at memory speed, and the gate passes a node at 8-15x what the job's first epoch gets.

So every open of a dataset file goes through one opener (``io.uncached.open_uncached``), which records
the file here, in one log per run (``ENV`` names it: the runner makes it in its temp directory and every
worker, DataLoader worker and check it starts inherits it, killed workers' reads included). A reader asks
``fresh(names)`` for the files not yet touched in this run, in the order given: checks, windows and
worker pools then continue one pass instead of starting it again, and a reader whose fresh files are spent
stops (``Spent``), saying so. A reader that must read again (the pass spent before it measured anything)
reads warm, and its row says so (``warm_note``): ``verdict`` never lets a warm figure pass a dataset
threshold on a filesystem where a cache can sit below the page cache (``Filesystem.may_cache_below``).

The log is a file of names, one per line, appended with O_APPEND: one ``write`` of a line shorter than
PIPE_BUF is atomic, so processes that share it never interleave. A test reads it to assert that no file
was opened twice in a run (``opened``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import tempfile
from typing import Callable, Iterator, Sequence, TypeVar

ENV = "PREFLIGHT_DATASET_PASS"
SHARE, MIN_SHARE = 0.1, 25  # of a dataset's files, what one storage part may read (``share``)
WARM = "warm: "  # how a row read twice begins to say so (``warm_note``)

Named = TypeVar("Named")


class Spent(Exception):
    """The files a reader may read once are all read: its sampling stops here, with this reason."""


_log: tuple[int, int] | None = None  # (pid, descriptor) of this process's open log


def log_path() -> str:
    """The run's log; outside a run (a bench, a test calling a check), one made for this process and its children."""
    path = os.environ.get(ENV)
    if not path:
        handle, path = tempfile.mkstemp(prefix="preflight-pass-", suffix=".log")
        os.close(handle)
        os.environ[ENV] = path
    return path


def record(name: str) -> None:
    """Note that ``name`` was opened for reading in this run (one atomic append); never raises for the log."""
    global _log
    try:
        if _log is None or _log[0] != os.getpid():  # a forked child opens its own descriptor
            _log = (os.getpid(), os.open(log_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600))
        os.write(_log[1], name.encode("utf-8", "surrogateescape") + b"\n")
    except OSError:
        pass  # a full or vanished temp dir must not stop a measurement: the pass then under-counts touches


def record_failure(name: str, why: str) -> None:
    """Note that reading (or decoding) ``name`` failed with ``why`` ("cannot be read: [Errno 5] ..."), as the job's
    worker would have raised there: the reader counts it and goes on; ``failures`` reads them back, across processes."""
    line = f"{name}\t{why}".replace("\n", " ").encode("utf-8", "surrogateescape")[:3000] + b"\n"
    try:
        fd = os.open(log_path() + ".failed", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass  # as ``record``: the log is never the measurement's failure


def failures(names: Sequence[str] | None = None) -> dict[str, str]:
    """The files whose reads failed in this run and why (the first reason each), of ``names`` when given."""
    wanted = None if names is None else set(names)
    found: dict[str, str] = {}
    try:
        with open(log_path() + ".failed", "rb") as handle:
            for line in handle.read().decode("utf-8", "surrogateescape").splitlines():
                name, _, why = line.partition("\t")
                if (wanted is None or name in wanted) and name not in found:
                    found[name] = why
    except OSError:
        pass
    return found


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


def opened() -> collections.Counter[str]:
    """How many times each file was opened in this run so far."""
    try:
        with open(log_path(), "rb") as handle:
            return collections.Counter(line.decode("utf-8", "surrogateescape") for line in handle.read().splitlines())
    except OSError:
        return collections.Counter()


def fresh(items: Sequence[Named], name: Callable[[Named], str] = str) -> list[Named]:  # type: ignore[assignment]
    """Those of ``items`` whose file (``name(item)``) was not opened yet in this run, in their order."""
    touched = opened()
    return [item for item in items if name(item) not in touched]


def share(items: Sequence[Named], of: int, name: Callable[[Named], str] = str) -> list[Named]:  # type: ignore[assignment]
    """The first of ``items`` not yet read in this run, at most a ``SHARE`` of ``of`` (the dataset's files found)
    but never fewer than ``MIN_SHARE``: a storage part leaves the rest of a small dataset to the parts and
    checks after it, so each of them still reads first touches (the DataLoader's included)."""
    return fresh(items, name)[:max(MIN_SHARE, int(of * SHARE))]


def touched_count(names: Sequence[str]) -> int:
    """How many of ``names`` were read in this run so far."""
    return len(names) - len(fresh(names))


def unread_since(items: Sequence[Named], before: collections.Counter[str],
                 name: Callable[[Named], str] = str) -> list[Named]:  # type: ignore[assignment]
    """Those of ``items`` not opened again since ``before`` (an ``opened()`` taken earlier), in their order."""
    now = opened()
    return [item for item in items if now[name(item)] <= before[name(item)]]


def warm_note(reread: int, of: int) -> str:
    """What a row read twice says: "" when nothing was re-read."""
    if not reread:
        return ""
    return (f"{WARM}{reread} of {of} files read a second time in this run (the first pass was spent), so a cache "
            f"can serve them")


@contextlib.contextmanager
def started(temp_dir: str) -> Iterator[str]:
    """A run's pass: a fresh log in ``temp_dir``, named in the environment its workers inherit; removed after."""
    global _log
    handle, path = tempfile.mkstemp(prefix="preflight-pass-", suffix=".log", dir=temp_dir)
    os.close(handle)
    before = os.environ.get(ENV)
    os.environ[ENV] = path
    _log = None
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
        if _log is not None and _log[0] == os.getpid():
            os.close(_log[1])
        _log = None
        for leftover in (path, path + ".failed"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)


class PassSampler:
    """A DataLoader sampler that continues one pass over ``names`` across every DataLoader given it.

    Fresh worker pools are fresh DataLoaders; with ``shuffle=True`` each would draw a new permutation and
    read again what the last one read. This one holds one permutation (``seed``) of the files not yet read
    in this run, fixed when its first DataLoader starts (after the checks and phases before it), and a cursor
    that every iterator advances: indices a pool took into its prefetch were read by its workers, so they
    are not handed out again. When the cursor reaches the end the pass is spent (``spent``) and the iterator
    stops, as the job's epoch ends. Where every file was already read in this run, the pass is over all of
    them again and ``warm`` says so. ``shuffle=False`` keeps the walk's order, as the job's would.
    """

    def __init__(self, names: Sequence[str] | int, shuffle: bool = True, seed: int = 0,
                 before: int | None = None, probed: int = 0) -> None:
        # names: the files, one per index; or how many samples a job's Dataset holds, whose files are not known
        self.names = list(names) if not isinstance(names, int) else None
        self.size = names if isinstance(names, int) else len(self.names)  # type: ignore[arg-type]
        self.shuffle, self.seed = shuffle, seed
        # how many of the files checks before this one read: given by a caller that read one itself meanwhile
        self.before = touched_count(self.names or ()) if before is None else before
        # how many the caller itself read before the pass (the cache-bypass probe, ``uncached.bypass_for``):
        # counted apart, so that the note's figures add up to the dataset's files (issue 35)
        self.probed = probed
        self.order: list[int] | None = None
        self.cursor = 0
        self.warm = False  # every sample of the current pass was read before in this run
        self.passes = 1  # passes begun: more than one where a loader was iterated past the pass's end

    def _start(self) -> list[int]:
        if self.order is None:
            if self.names is None:
                order = list(range(self.size))
            else:
                touched = opened()
                order = [i for i, name in enumerate(self.names) if name not in touched]
                self.warm = not order
                order = order or list(range(self.size))
            self.order = self._permuted(order, self.seed)
        return self.order

    def __iter__(self) -> Iterator[int]:
        order = self._start()
        if self.cursor >= len(order):  # a loader iterated again after the pass ended: the next epoch, a reread
            order = self._again()
        while self.cursor < len(order):
            self.cursor += 1
            yield order[self.cursor - 1]

    def _again(self) -> list[int]:
        """Start another pass over every sample (a training loop's next epoch): ``warm`` from now on."""
        self.passes += 1
        self.warm, self.cursor = True, 0
        self.order = self._permuted(list(range(self.size)), self.seed + self.passes)
        return self.order

    def _permuted(self, order: list[int], seed: int) -> list[int]:
        """``order`` shuffled with ``seed`` where the job shuffles, else as it is."""
        if self.shuffle:
            import random

            random.Random(seed).shuffle(order)
        return order

    def __len__(self) -> int:
        return len(self._start()) - self.cursor

    @property
    def spent(self) -> bool:
        """Whether every index of the pass was handed out."""
        return self.order is not None and self.cursor >= len(self.order)

    @property
    def read_before(self) -> int:
        """How many of its files checks before this one read (0 before its first DataLoader starts)."""
        return 0 if self.order is None or self.warm else self.before

    def describe(self) -> str:
        """How the pass went, for a row's note: how many files it read of how many, whether warm, and what read
        the rest: the files of the pass, those checks before this one read and the probe's add up to ``size``."""
        order = self._start()
        if self.passes > 1:
            return (f"{self.passes} passes over the {self.size} samples: the first is the job's first epoch, the "
                    f"others re-read it ({WARM.strip()} a cache can serve them)")
        said = f"one pass: {self.cursor} of {len(order)} files read once"
        if self.read_before or (self.probed and not self.warm and self.order is not None):
            by = [f"{self.read_before} {'other was' if self.read_before == 1 else 'others were'} read by checks "
                  f"before this one"] if self.read_before else []
            if self.probed:
                many = "" if self.read_before else (" other was" if self.probed == 1 else " others were")
                by.append(f"{self.probed}{many} read by this check's probe of the page-cache bypass (O_DIRECT)")
            said += f" ({', '.join(by)})"
        return warm_note(self.cursor, self.size) if self.warm else said
