"""Where the storage check's bytes come from: files already under ``path``, else scratch files.

``path`` is only ever read: files are opened read-only and nothing is created under it
(its directory mtimes stay as they were). Scratch data goes to a directory on the same
filesystem, outside ``path``: ``scratch_dir`` when given (the config refuses one inside
``path``), else the nearest writable directory above ``path`` on its filesystem.
"""

from __future__ import annotations

import itertools
import os
from typing import NamedTuple

from preflight.checks.storage.writes import write_fsynced
from preflight.dataset_walk import DataFile, dataset_files


class Found(NamedTuple):
    large: list[DataFile]  # the largest files, until the wanted bytes
    small: list[DataFile]  # files no larger than the small-file size


def survey(path: str, wanted_bytes: int, small_size: int, max_files: int) -> Found:
    """Files under ``path`` as ``dataset_walk`` finds them (at most ``max_files`` looked at)."""
    seen = list(itertools.islice(dataset_files(path), max_files))
    small = [f for f in seen if f.size <= small_size]
    large, total = [], 0
    for found in sorted(seen, key=lambda f: -f.size):
        if total >= wanted_bytes:
            break
        large.append(found)
        total += found.size
    return Found(large, small)


def scratch_parent(path: str, chosen: str, above: str | None) -> tuple[str | None, str]:
    """Where scratch goes: ``chosen`` (``scratch_dir``) or ``above`` (``scratch.parent_outside(path)``).

    Returns the directory, or None and the one-line reason with the fix.
    """
    if chosen:
        if not os.path.isdir(chosen) or not os.access(chosen, os.W_OK):
            return None, f"scratch_dir {chosen} is not a writable directory: create it or set storage.scratch_dir"
        return chosen, ""
    if above is None:
        return None, (f"{path} is its own filesystem's top, where preflight will not write: set storage.scratch_dir "
                      f"to a writable directory on that filesystem, outside {path}")
    return above, ""


def write_file(name: str, size: int, chunk: bytes) -> DataFile:
    """Write ``size`` incompressible bytes, fsync them, and drop them from the page cache."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_fsynced(fd, size, chunk)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return DataFile(name, size)


def write_small_files(directory: str, count: int, size: int) -> list[DataFile]:
    """``count`` files of ``size`` bytes in 100 subdirectories (as ImageNet's class folders)."""
    chunk = os.urandom(size)
    files = []
    for index in range(count):
        folder = os.path.join(directory, "small", f"{index % 100:03d}")
        os.makedirs(folder, exist_ok=True)
        name = os.path.join(folder, f"{index:06d}.bin")
        with open(name, "wb") as handle:
            handle.write(chunk[index % 64:] + chunk[: index % 64])  # distinct bytes per file
        files.append(DataFile(name, size))
    os.sync()  # DONTNEED drops clean pages only
    for found in files:
        fd = os.open(found.name, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    return files
