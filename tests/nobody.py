"""Running a child process as user ``nobody`` from a checkout that ``nobody`` may not read.

A checkout cloned into a directory of mode 0700 (what ``mktemp -d`` makes), with its venv inside, cannot be
entered by any other user: a child switched to ``nobody`` would fail with "No module named preflight". So the
child gets its own world-readable temporary tree: a copy of this checkout's ``preflight`` and ``tests`` (small),
hard links of every ``sys.path`` folder nobody cannot reach in place (the venv's site-packages: torch's 700 MB
linked, not copied), and the base interpreter instead of the venv's ``bin/python`` (found through the venv's
folder, which nobody may not enter; the venv's packages come through PYTHONPATH). What cannot be made readable
that way (a filesystem without hard links to a world-readable folder, an interpreter under /root) is a skip that
names it, found by importing the modules as ``nobody`` before the test runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

from tests.helpers import REPO

UID = 65534  # nobody, and nogroup, on Debian and most images
SWITCH = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]


class Child(NamedTuple):
    """What a child run as ``nobody`` needs: an interpreter it may run, and the PYTHONPATH and cwd it may read."""

    python: str
    pythonpath: str
    cwd: str


def reachable(path: Path) -> bool:
    """Whether a user that is neither the owner nor in the group of any folder on the way may read ``path``:
    every folder above it searchable by others, and ``path`` itself readable (and, a folder, searchable)."""
    path = path.resolve()
    for folder in path.parents:
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(path).st_mode
    return bool(mode & stat.S_IROTH) and (not stat.S_ISDIR(mode) or bool(mode & stat.S_IXOTH))


@contextlib.contextmanager
def child(*modules: str) -> Iterator[Child]:
    """A world-readable tree from which user ``nobody`` imports this checkout's ``preflight`` and ``tests`` and
    ``modules``, removed afterwards; skips the test, with the import's error, where nobody still cannot.

    Needs root (to switch user) and setpriv; the caller skips without them.
    """
    tree = Path(tempfile.mkdtemp(prefix="preflight-nobody-"))
    try:
        os.chmod(tree, 0o755)
        for package in ("preflight", "tests"):
            shutil.copytree(REPO / package, tree / "src" / package, ignore=shutil.ignore_patterns("__pycache__"))
        path = [str(tree / "src")]
        for number, entry in enumerate(_packages()):
            path.append(str(entry) if reachable(entry) else _linked(entry, tree / f"path{number}"))
        found = Child(_interpreter(), os.pathsep.join(path), str(tree))
        probe = subprocess.run([*SWITCH, "env", f"PYTHONPATH={found.pythonpath}", found.python, "-c",
                                f"import {', '.join(('preflight', 'tests.helpers', *modules))}"],
                               cwd=tree, capture_output=True, text=True, timeout=120)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
            pytest.skip(f"user nobody cannot import this checkout's code from a readable copy: {last}")
        yield found
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _packages() -> list[Path]:
    """The folders of ``sys.path`` that hold installed packages: not this checkout (copied instead) and not the
    standard library, which the interpreter the child runs brings (a pyenv one's would not match the system's)."""
    standard = Path(sys.base_prefix).resolve()
    entries = []
    for entry in dict.fromkeys(Path(p).resolve() for p in sys.path if p and os.path.isdir(p)):
        installed = entry.name in ("site-packages", "dist-packages") or not entry.is_relative_to(standard)
        if entry != REPO.resolve() and installed:
            entries.append(entry)
    return entries


def _linked(folder: Path, copy: Path) -> str:
    """``folder``'s files hard-linked under ``copy`` (its own folders made anew, same modes), or, where they cannot
    be linked (another filesystem), ``folder`` itself: the import probe then names what nobody cannot read."""
    try:
        shutil.copytree(folder, copy, copy_function=os.link, symlinks=True)  # byte code too: torch imports in 2 s
    except (OSError, shutil.Error):
        shutil.rmtree(copy, ignore_errors=True)
        return str(folder)
    return str(copy)


def _interpreter() -> str:
    """An interpreter of this Python's version that nobody may run: this venv's base (``sys._base_executable``),
    else the system's (a pyenv build under /root is not), else the base, for the probe to name."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [getattr(sys, "_base_executable", "") or sys.executable, f"/usr/bin/{version}",
                  shutil.which(version) or ""]
    found = [os.path.realpath(path) for path in candidates if path and os.path.exists(path)]
    return next((path for path in found if reachable(Path(path))), found[0])
