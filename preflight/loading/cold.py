"""A claim of cold, verified: the job's Dataset's files dropped from the page cache before its pass, and checked.

Loading layer. The job's Dataset opens its files itself (issue 32: a second run read 2.3x the first), so the files it
names (``exposed``) are probed, dropped and probed again (``io.residency``): what stays makes the rows ``warm:`` and
``cache_bound``. docs/checks.md ("Cold is checked, not assumed").
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, NamedTuple

from preflight.host.fsinfo import Filesystem, filesystem_of
from preflight.io import residency
from preflight.io.dataset_walk import listing

WARM_SHARE = 0.05  # resident after the drop above this share of the pages probed: the figure is read from memory
MAX_FILES = 100_000  # of the files a Dataset lists, at most these are taken (``evict`` stops after EVICT_S anyway)
WALKED = 10_000  # files walked under a directory the Dataset names (``dataset_walk``), at most
WALK_S = 2.0  # and for at most this long


class Cold(NamedTuple):
    """What was done to make the job's Dataset read cold, and whether it does."""

    method: str  # for the method column: what the page cache held, what was dropped, what stayed
    note: str  # "" when cold; else begins ``warm:`` and says the share and why
    warm: bool  # pages stayed resident: the read rows are cache-bound


def verified(dataset: Any, arguments: Mapping[str, Any]) -> Cold:
    """Find ``dataset``'s files (``exposed``), drop their clean pages and check that they went (module doc)."""
    names, found_in = exposed(dataset, arguments)
    if not names:
        return Cold("page cache not verified cold: the job's Dataset names no files preflight can find (a list of "
                    "paths on the Dataset, or a file or directory on it or in its factory's arguments)", "", False)
    probed = residency.sample(names)
    before = residency.probe(probed)
    if not before.pages:
        return Cold(f"page cache not verified cold: none of the {len(probed)} files sampled of {found_in} could be "
                    f"probed", "", False)
    evicted = residency.evict(names)
    after = residency.probe(probed, shift=1)  # RWF_NOWAIT's pages: not the ones the first probe may have read
    if after.method == residency.NOWAIT:
        residency.evict(probed)  # what the probes themselves read
    try:
        fs: Filesystem | None = filesystem_of(os.path.dirname(os.path.realpath(probed[0])))
    except OSError:  # its folder vanished since: the filesystem is not named
        fs = None
    left = (f", {evicted.of - evicted.dropped} not (unreadable, or past {residency.EVICT_S:g} s)"
            if evicted.dropped < evicted.of else "")
    method = (f"page cache before the pass: {before.share:.0%} of {before.pages} pages sampled in {before.files} of "
              f"{len(names)} files ({found_in}) resident ({before.method}), dropped (posix_fadvise DONTNEED on "
              f"{evicted.dropped} files{left}), {after.share:.0%} after")
    if fs is not None and fs.may_cache_below:
        method += f"; {fs.fstype} can cache below the page cache, out of reach of DONTNEED"
    if after.share <= WARM_SHARE:
        return Cold(method, "", False)
    why = ("pages another process maps or locks, and dirty pages, cannot be dropped" if fs is None or
           not fs.memory_backed else f"{fs.fstype} is RAM: the dataset lives in memory, its pages cannot be dropped")
    return Cold(method, f"warm: {after.share:.0%} of the pages sampled in the job's dataset files stayed in the page "
                        f"cache after posix_fadvise(DONTNEED) ({why}), so the figure is read from memory, not the "
                        f"job's cold first epoch", True)


def exposed(dataset: Any, arguments: Mapping[str, Any]) -> tuple[list[str], str]:
    """The files the job's Dataset reads, as far as it names them, and where they were found ("its .samples"): a list
    of paths on it or the Dataset it wraps (ImageFolder's ``.samples``), a file an attribute or ``arguments`` names,
    else the files under a directory either names (``WALKED``, ``WALK_S``); ([], "") where none."""
    for holder, label in _holders(dataset):
        for attribute, value in _attributes(holder):
            names = _paths(value)
            if names:
                return names, f"the Dataset's {label}{attribute}"
    named = [(f"the Dataset's .{k}", v) for k, v in _attributes(dataset)]
    named += [(f"dataset_args.{k}", v) for k, v in arguments.items()]
    paths = [(label, os.fspath(value)) for label, value in named if isinstance(value, (str, os.PathLike))]
    # one file of many samples (an ark, an HDF5, a .npy read at offsets), beside a folder or alone
    names, found_in = sorted({path for _, path in paths if os.path.isfile(path)}), [
        label for label, path in paths if os.path.isfile(path)]
    for label, path in paths:
        if os.path.isdir(path) and not _holds_python(path):
            walked = _walked(path)
            if walked:
                names, found_in = names + walked, [*found_in, f"under {path}, {label}"]
                break
    return names, "; ".join(found_in)


def _holders(dataset: Any, depth: int = 3) -> list[tuple[Any, str]]:
    """``dataset`` and the Datasets it wraps (``.dataset``, ``.datasets``), with their labels."""
    found, label = [(dataset, ".")], ""
    inner = dataset
    for _ in range(depth):
        wrapped = getattr(inner, "dataset", None)
        if wrapped is None or wrapped is inner:
            break
        label += "dataset."
        found.append((wrapped, "." + label))
        inner = wrapped
    for i, part in enumerate(getattr(dataset, "datasets", None) or ()):
        found.append((part, f".datasets[{i}]."))
    return found


def _attributes(holder: Any) -> list[tuple[str, Any]]:
    try:
        return list(vars(holder).items())
    except TypeError:  # no __dict__ (slots, a C type)
        return []


def _paths(value: Any) -> list[str]:
    """``value``'s items as file names where it is a list of paths to regular files (or of tuples led by one)."""
    if not isinstance(value, (list, tuple)) or not value:
        return []

    def name(item: Any) -> str | None:
        if isinstance(item, (tuple, list)) and item:
            item = item[0]
        return os.fspath(item) if isinstance(item, (str, os.PathLike)) else None

    head = [name(item) for item in value[:3]]
    if not all(n and os.path.isfile(n) for n in head):
        return []
    return [n for n in map(name, residency.sample(value, MAX_FILES)) if n]  # spread over a list of millions


def _holds_python(directory: str) -> bool:
    """Whether ``directory`` holds this Python or preflight (a root of "/" or "."): not a dataset to drop from the
    page cache; its workers would read their own libraries again from the disk."""
    real = os.path.realpath(directory)
    return any(os.path.commonpath([real, os.path.realpath(inside)]) == real
               for inside in (sys.prefix, os.path.dirname(__file__)))


def _walked(directory: str) -> list[str]:
    files, _ = listing(directory, WALKED, WALK_S)
    return [f.name for f in files]
