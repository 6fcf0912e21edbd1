"""Reading files from the device, not the page cache: O_DIRECT, else dropping cached pages.

The order follows fio's ``--direct=1`` and, where that is refused, fio's
``--invalidate=1`` (``posix_fadvise(POSIX_FADV_DONTNEED)`` before reading; fio(1)). O_DIRECT
needs the buffer, offset and length aligned to the logical block size; memory from an
anonymous ``mmap`` is page-aligned, and 4 KiB covers every common logical block size.
DONTNEED only drops clean pages, so scratch data is fsynced before it is read. On tmpfs
and ramfs neither reaches a device: the method is ``none`` and numbers are cache-bound.
"""

from __future__ import annotations

import errno
import mmap
import os
from typing import TYPE_CHECKING, Literal, Sequence

if TYPE_CHECKING:
    from preflight.io.dataset import Dataset

Bypass = Literal["O_DIRECT", "fadvise", "none"]
ALIGNMENT = 4096


def aligned_buffer(size: int) -> mmap.mmap:
    """A page-aligned, zero-filled buffer of ``size`` bytes rounded up to ``ALIGNMENT``."""
    return mmap.mmap(-1, max(ALIGNMENT, -(-size // ALIGNMENT) * ALIGNMENT))


def bypass_for(names: str | Sequence[str], memory_backed: bool, dataset: Dataset | None = None) -> Bypass:
    """How reads of ``names`` (one file, or files on one filesystem) can avoid the page cache here.

    Probes one aligned O_DIRECT read of the first file that still exists (EINVAL means the
    filesystem refuses it: tmpfs, some FUSE and overlay setups). Raises OSError for any other
    failure to open or read, or when every file has vanished. Among several files of the run's ``dataset`` it
    probes one not read yet, and that one then counts as read in its pass: a client that fetches whole files
    holds it now, so no reader measures it.
    """
    if memory_backed:
        return "none"
    candidates = [names] if isinstance(names, str) else list(names)
    untouched = dataset.fresh(candidates) if dataset is not None else candidates  # probe what no reader measured: a probe reads
    candidates = untouched + [name for name in candidates if name not in untouched]
    for name in candidates[:-1]:
        try:
            found = _probe(name)
        except FileNotFoundError:
            continue  # vanished since it was chosen: try the next
        except OSError as error:
            if error.errno != errno.EIO:
                raise
            continue  # a bad sector or a lost object: the readers count it; the next file answers for the bypass
        if dataset is not None:
            dataset.record(name)
        return found
    return _probe(candidates[-1])


def _probe(name: str) -> Bypass:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECT)
    except OSError as error:
        if error.errno == errno.EINVAL:
            return "fadvise"
        raise
    try:
        os.preadv(fd, [aligned_buffer(ALIGNMENT)], 0)
        return "O_DIRECT"
    except OSError as error:
        if error.errno == errno.EINVAL:
            return "fadvise"
        raise
    finally:
        os.close(fd)


def open_uncached(name: str, bypass: Bypass, dataset: Dataset | None = None) -> int:
    """Open ``name`` read-only so its next reads come from the device (see module doc).

    Every open of a dataset file comes here, and is recorded in the run's ``dataset``, so no reader takes
    for cold a file this run already read; None for a file of no dataset (scratch), or for a reader that
    records the file itself when it first reads from it (random reads open every file up front and read few).
    """
    if dataset is not None:
        dataset.record(name)
    if bypass == "O_DIRECT":
        return os.open(name, os.O_RDONLY | os.O_DIRECT)
    fd = os.open(name, os.O_RDONLY)
    if bypass == "fadvise":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return fd


def drop_cached(fd: int, offset: int = 0, length: int = 0) -> None:
    """Drop the clean cached pages of ``fd`` in [offset, offset+length) (0: to the end)."""
    os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def read_file(name: str, bypass: Bypass, buffer: mmap.mmap, keep: bytearray | None = None,
              dataset: Dataset | None = None) -> int:
    """Read all of ``name`` through ``buffer``, one buffer-full per read, uncached; returns the bytes read.

    Memory stays the buffer's size whatever the file's: a 1.2 GB file is about 1,150 reads of a
    1 MiB buffer, never a 1.2 GB buffer (issue 21, case 6: a worker sized its buffer to the largest
    file and was OOM-killed under a 1 GiB limit). ``keep``, when given, receives the bytes read
    (a decoder needs the whole file, as the job's own would). The open is recorded in ``dataset``.

    Raises:
        OSError: a read failed, also after a short read part way through the file (EIO after 128 KiB).
    """
    fd = open_uncached(name, bypass, dataset)
    try:
        size, total = os.fstat(fd).st_size, 0
        while True:
            got = os.preadv(fd, [buffer], total)
            if keep is not None:
                keep += buffer[:got]
            total += got
            # A short read before the file's end is not its end: read(2) returns the bytes it got before an
            # error, and the next read raises it (EIO part way through a file: dansuh17/segan-pytorch#19).
            if got == 0 or got < len(buffer) and total >= size:
                return total
    finally:
        os.close(fd)


def describe(bypass: Bypass) -> str:
    return {
        "O_DIRECT": "O_DIRECT (page cache bypassed)",
        "fadvise": "O_DIRECT refused; posix_fadvise(DONTNEED) drops cached pages before reading",
        "none": "no bypass possible (memory-backed filesystem): cache-bound",
    }[bypass]
