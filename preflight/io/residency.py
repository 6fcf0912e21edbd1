"""How much of a set of files sits in the page cache, found without reading them; and dropping it (io layer).

For the job's own Dataset, out of the uncached opener's reach (``loading.cold``)::

    sample up to MAX_FILES files, evenly spread over the list
    probe: mincore(2) over an untouched read-only mapping of each file's first MAX_BYTES; where mincore cannot
           see the cache (mm/mincore.c can_do_mincore), PROBE_PAGES preadv2(RWF_NOWAIT) reads (EAGAIN: not cached)
    evict: syncfs(2) (DONTNEED leaves dirty pages), then posix_fadvise(DONTNEED) per file until EVICT_S
           (fio's --invalidate=1; tmpfs and mapped or locked pages stay)
    probe the same sample again (other pages, for RWF_NOWAIT)

A cache below the page cache (FUSE, NFS) is out of reach (``Filesystem.may_cache_below``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import time
from typing import NamedTuple, Sequence

MAX_FILES = 256  # files sampled per probe: a few hundred opens, well under a second on a local disk
MAX_BYTES = 16 << 20  # of each sampled file, the first bytes probed (mincore: one byte per page, 4 KiB for 16 MiB)
PROBE_PAGES = 4  # pages per file read with RWF_NOWAIT, where mincore cannot see the page cache
PROBE_S = 1.0  # a probe stops sampling after this long (a slow network mount): the files probed so far answer
EVICT_S = 2.0  # eviction stops after this long; the files left are said, and the second probe measures what stayed
PAGE = mmap.PAGESIZE

MINCORE, NOWAIT = "mincore(2)", "preadv2(RWF_NOWAIT)"


class Residency(NamedTuple):
    """What one probe found: pages of the sampled files in the page cache, of the pages probed."""

    files: int  # files probed
    pages: int  # pages probed in them
    resident: int  # of those, in the page cache
    method: str  # MINCORE or NOWAIT, "" where no file could be probed
    unprobed: int = 0  # sampled files that could not be probed (vanished, unreadable): not counted

    @property
    def share(self) -> float:
        """Resident pages over pages probed, 0..1 (0 where none were probed)."""
        return self.resident / self.pages if self.pages else 0.0


class Evicted(NamedTuple):
    """What ``evict`` did: files whose clean cached pages were dropped, of the files given."""

    dropped: int
    of: int
    failed: int = 0  # files that could not be opened or advised


def sample(names: Sequence[str], limit: int = MAX_FILES) -> list[str]:
    """At most ``limit`` of ``names``, evenly spread over the list (its start, middle and end alike)."""
    if len(names) <= limit:
        return list(names)
    step = len(names) / limit
    return [names[int(i * step)] for i in range(limit)]


def probe(names: Sequence[str], shift: int = 0, time_s: float = PROBE_S) -> Residency:
    """How many pages of ``names`` (each file's first ``MAX_BYTES``) are in the page cache, read from none. ``shift``
    moves the RWF_NOWAIT fallback's pages; files that cannot be opened are counted in ``unprobed``, never raised."""
    files = pages = resident = unprobed = 0
    methods: set[str] = set()
    started = time.monotonic()
    for name in names:
        if time.monotonic() - started > time_s and files:
            break
        try:
            found = _probe_file(name, shift)
        except OSError:
            unprobed += 1
            continue
        if found is None:  # an empty file: no page to hold
            continue
        files, pages, resident = files + 1, pages + found[1], resident + found[0]
        methods.add(found[2])
    method = NOWAIT if NOWAIT in methods else (MINCORE if methods else "")
    return Residency(files, pages, resident, method, unprobed)


def evict(names: Sequence[str], time_s: float = EVICT_S) -> Evicted:
    """Drop the clean cached pages of each of ``names`` (``POSIX_FADV_DONTNEED``), in order, for up to ``time_s``,
    after ``syncfs`` of the first file's filesystem (a dataset just written stayed 100% resident without it). Nothing
    is read; a failed file is counted in ``failed``, never raised."""
    dropped = failed = 0
    synced = False
    started = time.monotonic()
    for name in names:
        if time.monotonic() - started > time_s:
            break
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            failed += 1
            continue
        try:
            if not synced:
                _syncfs(fd)
                synced = True
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            dropped += 1
        except OSError:
            failed += 1
        finally:
            os.close(fd)
    return Evicted(dropped, len(names), failed)


def _probe_file(name: str, shift: int) -> tuple[int, int, str] | None:
    """(resident pages, pages probed, method) of ``name``'s first ``MAX_BYTES``; None for an empty file."""
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        status = os.fstat(fd)
        length = min(status.st_size, MAX_BYTES)
        if length <= 0:
            return None
        if _mincore_sees(name, status):
            counted = _mincore(fd, length)
            if counted is not None:
                return counted[0], counted[1], MINCORE
        return (*_nowait(fd, length, shift), NOWAIT)
    finally:
        os.close(fd)


def _mincore_sees(name: str, status: os.stat_result) -> bool:
    """Whether mincore(2) reports ``name``'s page cache to this process: root (CAP_FOWNER), its owner, or a user who
    may write it (Linux >= 5.0 reports only this process's own mappings otherwise: all zeros, a false "cold")."""
    return os.geteuid() == 0 or status.st_uid == os.geteuid() or os.access(name, os.W_OK)


def _mincore(fd: int, length: int) -> tuple[int, int] | None:
    """(resident, pages) of the first ``length`` bytes of ``fd`` by mincore(2) over a mapping never touched; None
    where libc or the mapping fails (the caller falls back to RWF_NOWAIT)."""
    libc = _libc()
    if libc is None:
        return None
    address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        pages = -(-length // PAGE)
        vector = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.c_void_p(address), length, vector) != 0:
            return None
        return sum(byte & 1 for byte in vector), pages
    finally:
        libc.munmap(ctypes.c_void_p(address), length)


def _nowait(fd: int, length: int, shift: int) -> tuple[int, int]:
    """(resident, pages) of ``PROBE_PAGES`` pages spread over ``length`` bytes, each read with RWF_NOWAIT (EAGAIN:
    not cached). Raises OSError where the kernel refuses the flag (before 4.14: EOPNOTSUPP) or a read fails."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead past the page asked for
    buffer = bytearray(PAGE)
    total = -(-length // PAGE)
    offsets = sorted({((total * i) // PROBE_PAGES + shift) % total for i in range(PROBE_PAGES)})
    resident = 0
    for page in offsets:
        try:
            resident += os.preadv(fd, [buffer], page * PAGE, os.RWF_NOWAIT) > 0
        except BlockingIOError:
            continue
        except OSError as error:
            if error.errno != errno.EAGAIN:
                raise
    return resident, len(offsets)


def written_back(name: str) -> None:
    """Write back the dirty pages of the filesystem that holds ``name`` (``syncfs``), so that posix_fadvise(DONTNEED)
    can drop a just-written dataset's pages; nothing where ``name`` cannot be opened (its reader then says why)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return
    try:
        _syncfs(fd)
    finally:
        os.close(fd)


def _syncfs(fd: int) -> None:
    """Write back the dirty pages of ``fd``'s filesystem (syncfs(2), Linux >= 2.6.39); where libc has no syncfs or
    the filesystem refuses it, nothing (the eviction then drops the clean pages only)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "syncfs"):
        libc.syncfs(fd)


_LIBC: list[ctypes.CDLL | None] = []


def _libc() -> ctypes.CDLL | None:
    """libc with mmap, mincore and munmap typed; None where it cannot be loaded."""
    if not _LIBC:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_long)
            libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
            libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
            _LIBC.append(libc)
        except (OSError, AttributeError):
            _LIBC.append(None)
    return _LIBC[0]
