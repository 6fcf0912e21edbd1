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
SHARE, MIN_SHARE = 0.2, 50  # of a dataset's files, what one storage part may read (``share``)
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
        with contextlib.suppress(OSError):
            os.unlink(path)
