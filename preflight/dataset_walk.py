"""Walk a dataset directory for the files a training job would read.

The walk is ``find PATH -xdev -type f -size +0 -not -path '*/.*'`` in Python: it stays on
``path``'s filesystem (a default of ``.`` run from ``/`` never wanders into /proc, /sys or
another mount), skips hidden entries (``.git``, ``.venv``, preflight's own scratch
directories), does not follow symbolic links, and visits directories in sorted order so
two runs see the same files.
"""

from __future__ import annotations

import os
import stat
from typing import Iterator, NamedTuple


class DataFile(NamedTuple):
    name: str  # the path as found under the walked directory
    size: int  # bytes


def dataset_files(path: str) -> Iterator[DataFile]:
    """Readable, non-empty regular files under ``path`` (or ``path`` itself if it is a file).

    Lazy: callers stop it when they have seen enough (``itertools.islice``). Unreadable
    directories are skipped silently, as ``find`` would report and go on.
    """
    try:
        top = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(top.st_mode):
        if top.st_size > 0 and os.access(path, os.R_OK):
            yield DataFile(path, top.st_size)
        return
    for root, directories, names in os.walk(path, onerror=lambda error: None):
        directories[:] = sorted(d for d in directories if not d.startswith(".") and _same_device(root, d, top))
        for name in sorted(names):
            if name.startswith("."):
                continue
            full = os.path.join(root, name)
            try:
                info = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_size > 0 and os.access(full, os.R_OK):
                yield DataFile(full, info.st_size)


def _same_device(root: str, directory: str, top: os.stat_result) -> bool:
    try:
        return os.lstat(os.path.join(root, directory)).st_dev == top.st_dev
    except OSError:
        return False
