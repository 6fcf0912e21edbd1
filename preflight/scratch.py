"""Scratch directories that are removed on success, failure, timeout and signals.

A check creates scratch space only through ``scratch_dir``. Before using it, the path
is announced to ``on_create`` (the worker forwards it to the runner), so that when a
check is killed at its timeout the runner still removes what it left behind.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from typing import Callable, Iterator

PREFIX = ".preflight-scratch-"
on_create: Callable[[str], None] = lambda path: None  # noqa: E731  (replaced by the worker)


@contextlib.contextmanager
def scratch_dir(parent: str) -> Iterator[str]:
    """A fresh directory under ``parent`` (same filesystem), removed when the block exits.

    Raises:
        OSError: ``parent`` is missing or not writable.
    """
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
