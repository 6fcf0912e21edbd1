"""Scratch directories removed on success, failure, timeout and signals, and the data written in them (io layer).

Never inside the dataset (``protect``); announced to ``on_create`` so the runner removes it after a killed check;
``room_for`` keeps ``RESERVE_BYTES`` and ``RESERVE_INODES`` free; ``ran_out`` names what an ENOSPC ran out of.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Callable, Iterator

from preflight.io.dataset_walk import SCRATCH_PREFIX, DataFile
from preflight.units import format_value

PREFIX = SCRATCH_PREFIX  # hidden, and never counted by the dataset walk
RESERVE_BYTES = 64 << 20  # left free on a volume whatever scratch data wants
RESERVE_INODES = 1024  # likewise for inodes: small_files scratch creates 1,100 (1,000 files in 100 folders)
on_create: Callable[[str], None] = lambda path: None  # noqa: E731  (replaced by the worker)


@contextlib.contextmanager
def scratch_dir(parent: str, protect: str = "") -> Iterator[str]:
    """A fresh directory under ``parent`` (same filesystem), removed when the block exits; ``protect`` names a tree
    (the dataset) that scratch must never go into.

    Raises:
        OSError: ``parent`` is missing or not writable.
        PermissionError: ``parent`` is inside ``protect``.
    """
    if protect and is_inside(parent, protect):
        raise PermissionError(f"refusing to write scratch in {parent}: it is inside the dataset path {protect}, "
                              f"which preflight never writes")
    path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    on_create(path)
    try:
        yield path
    finally:
        remove(path)


def remove(path: str) -> None:
    """Remove a scratch directory; only ever one this module named."""
    if PREFIX in path:
        shutil.rmtree(path, ignore_errors=True)


def is_inside(path: str, tree: str) -> bool:
    """True when ``path`` is ``tree`` or under it, after resolving symbolic links and ``..``."""
    path, tree = os.path.realpath(path), os.path.realpath(tree)
    return path == tree or path.startswith(tree.rstrip(os.sep) + os.sep)


def parent_outside(path: str) -> str | None:
    """The nearest writable ancestor of ``path`` on the same filesystem, outside it; None if there is none (a dataset
    that is its own mount point needs an explicit ``scratch_dir``)."""
    path = os.path.realpath(path)
    try:
        device = os.stat(path).st_dev
    except OSError:
        return None
    candidate = os.path.dirname(path)
    while candidate != path:
        try:
            if os.stat(candidate).st_dev != device:
                return None
        except OSError:
            return None
        if os.access(candidate, os.W_OK):
            return candidate
        path, candidate = candidate, os.path.dirname(candidate)
    return None


def choose_parent(path: str, chosen: str, option: str) -> tuple[str | None, str]:
    """Where scratch for ``path`` goes: ``chosen``, else ``parent_outside(path)``; or None and the one-line reason
    with the fix (``option`` names the key to set)."""
    if chosen:
        if not os.path.isdir(chosen) or not os.access(chosen, os.W_OK):
            return None, f"scratch_dir {chosen} is not a writable directory: create it or set {option}"
        return chosen, ""
    above = parent_outside(path)
    if above is None and _read_only(path):
        # Not "set scratch_dir on that filesystem": a read-only mount has no writable directory to name.
        return None, (f"{path} lies on a read-only mount, where no scratch can be written; scratch in {option} on "
                      f"another filesystem is measured but labelled as not the dataset's")
    if above is None:
        return None, (f"{path} is its own filesystem's top, or nothing above it is writable, and preflight never "
                      f"writes inside it: set {option} to a writable directory on that filesystem, outside {path}")
    return above, ""


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def room_for(directory: str, nbytes: int, files: int = 1) -> str:
    """"" when ``directory``'s filesystem can take ``nbytes`` in ``files`` new files and keep the reserves free
    (statvfs ``f_bavail``, ``f_favail``; bytes only where no inodes are reported), else why not."""
    try:
        info = os.statvfs(directory)
    except OSError as error:
        return f"cannot stat {directory} for free space ({error.strerror})"
    free = info.f_bavail * info.f_frsize
    if info.f_files and info.f_favail - RESERVE_INODES < files:
        return (f"no inodes for scratch: {info.f_favail} of {info.f_files} inodes free in {directory}, {files} "
                f"needed and {RESERVE_INODES} kept free (bytes are not short: {_size(free)} free)")
    if free - RESERVE_BYTES >= nbytes:
        return ""
    return (f"no space for scratch: {_size(free)} free in {directory}, {_size(nbytes)} needed "
            f"and {_size(RESERVE_BYTES)} kept free")


def _size(nbytes: float) -> str:
    """A byte size in the unit that fits it (``units.format_value``): 300 KiB free is not "0 MiB free"."""
    return format_value(float(nbytes), "B")


def ran_out(directory: str) -> str:
    """Which of bytes or inodes an ENOSPC in ``directory`` ran out of (open(2) and write(2) give one ENOSPC for both),
    from statvfs now ("no inodes left (0 of 2048 free; ...)"); "" when ``directory`` vanished."""
    try:
        info = os.statvfs(directory)
    except OSError:
        return ""
    free, size = info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize
    inodes_out = info.f_files > 0 and info.f_favail == 0
    bytes_out = free < RESERVE_BYTES
    inodes = f"{info.f_favail} of {info.f_files} inodes free" if info.f_files else "no inode count reported"
    space = f"{_gib(free)} of {_gib(size)} free"
    if inodes_out and bytes_out:
        return f"no inodes and no space left in {directory} ({inodes}; {space})"
    if inodes_out:
        return (f"no inodes left in {directory} ({inodes}; {space}, so bytes are not what ran out): every new "
                f"file fails, whatever its size")
    return f"no space left in {directory} ({space}; {inodes})"


def _gib(nbytes: int) -> str:
    return format_value(float(nbytes), "B")


def write_fsynced(fd: int, size: int, chunk: bytes) -> int:
    """Write ``size`` bytes to ``fd`` in ``len(chunk)`` pieces, then fsync; returns bytes written. Every 4 KiB block
    is made unique (``stamped``), so a deduplicating volume cannot store it once (axboe/fio#463)."""
    written, serial = 0, _first_serial()
    while written < size:
        piece = stamped(chunk[: min(len(chunk), size - written)], serial + written // DEDUP_BLOCK)
        written += os.write(fd, piece)
    os.fsync(fd)
    return written


DEDUP_BLOCK = 4096  # the smallest block a deduplicating filesystem compares (ZFS, VDO, btrfs tools: 4 KiB and up)


def stamped(data: bytes, serial: int) -> bytes:
    """``data`` with the 8-byte ``serial``, ``serial + 1``, ... at the start of each 4 KiB block: no two
    blocks alike, the rest still random, so nothing deduplicates or compresses them."""
    out = bytearray(data)
    for block, offset in enumerate(range(0, len(out), DEDUP_BLOCK)):
        out[offset:offset + 8] = ((serial + block) % (1 << 64)).to_bytes(8, "little")[: len(out) - offset]
    return bytes(out)


def _first_serial() -> int:
    return int.from_bytes(os.urandom(8), "little")


def write_file(name: str, size: int, chunk: bytes) -> DataFile:
    """Write ``size`` incompressible bytes, fsync them, and drop them from the page cache.

    Raises:
        OSError: the write failed (ENOSPC when another writer filled the volume meanwhile).
    """
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_fsynced(fd, size, chunk)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return DataFile(name, size)


def write_small_files(directory: str, count: int, size: int) -> list[DataFile]:
    """``count`` files of ``size`` bytes in 100 class folders (ImageNet's shape), synced and uncached.

    Raises:
        OSError: a write failed.
    """
    chunk, serial = os.urandom(size), _first_serial()
    files = []
    for index in range(count):
        folder = os.path.join(directory, "small", f"{index % 100:03d}")
        os.makedirs(folder, exist_ok=True)
        name = os.path.join(folder, f"{index:06d}.bin")
        with open(name, "wb") as handle:
            handle.write(stamped(chunk, serial + index * (size // DEDUP_BLOCK + 1)))  # no two blocks alike
        files.append(DataFile(name, size))
    os.sync()  # DONTNEED drops clean pages only
    for found in files:
        fd = os.open(found.name, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    return files
