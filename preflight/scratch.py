"""Scratch directories that are removed on success, failure, timeout and signals.

A check creates scratch space only through ``scratch_dir``, and never inside the dataset
path it measures (``protect``; ``parent_outside`` finds a place next to it). Before using it, the path
is announced to ``on_create`` (the worker forwards it to the runner), so that when a
check is killed at its timeout the runner still removes what it left behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Callable, Iterator

PREFIX = ".preflight-scratch-"
on_create: Callable[[str], None] = lambda path: None  # noqa: E731  (replaced by the worker)


@contextlib.contextmanager
def scratch_dir(parent: str, protect: str = "") -> Iterator[str]:
    """A fresh directory under ``parent`` (same filesystem), removed when the block exits.

    ``protect`` names a read-only tree (the dataset) that scratch must never go into.

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
    """The nearest writable ancestor of ``path`` on the same filesystem, outside it; None if there is none.

    Where a dataset path is its own mount point (``/data``), no such directory exists
    and the caller must ask for an explicit ``scratch_dir``.
    """
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
