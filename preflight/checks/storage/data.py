"""Which bytes the storage check reads: the dataset's own files where they suit the metric, else scratch.

``path`` is never written; the device holding most of the dataset's bytes is measured (``Found.devices``).
``seq_read``/``rand_read`` read files of ``LARGE_FILE`` or more up to ``data_size``, data extents only, else a scratch
file beside the dataset (``Source.note``). docs/checks.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from preflight.io.dataset import Dataset
from preflight.io.dataset_walk import DataFile, Walk, by_device, data_extents, listing
from preflight.io.uncached import ALIGNMENT

LARGE_FILE = 8 << 20

Segment = tuple[str, int, int]  # a file, and the [start, end) byte range of it that is read


class Found(NamedTuple):
    large: list[DataFile]  # files of LARGE_FILE or more on devices[0], largest first, until the wanted bytes
    small: list[DataFile]  # files no larger than the small-file size on devices[0], in walk order
    files: list[DataFile]  # every data file the walk found
    walk: Walk  # what the walk skipped, and whether it was cut short
    devices: list[list[DataFile]]  # ``files`` by the device holding their bytes, most bytes first


def survey(path: str, wanted_bytes: int, small_size: int, max_files: int, seconds: float = math.inf,
           dataset: Dataset | None = None) -> Found:
    """Files under ``path`` as the run's ``dataset`` lists them (``dataset_walk.listing``: at most ``max_files``,
    walked for ``seconds`` at most); ``large`` and ``small`` come from the device that holds most of their bytes."""
    seen, walk = (dataset.files if dataset is not None else listing)(path, max_files, seconds)
    devices = by_device(seen)
    measured = devices[0] if devices else []
    small = [f for f in measured if f.size <= small_size]
    large, total = [], 0
    for found in sorted((f for f in measured if f.size >= LARGE_FILE), key=lambda f: -f.size):
        if total >= wanted_bytes:
            break
        large.append(found)
        total += found.size
    return Found(large, small, seen, walk, devices)


def segments(files: Sequence[DataFile], wanted_bytes: int) -> list[Segment]:
    """The data extents of ``files`` in order, page-aligned, until ``wanted_bytes`` of data; a file that may be sparse
    is asked for its extents, any other is one segment.

    Raises:
        OSError: a file cannot be opened.
    """
    found: list[Segment] = []
    total = 0
    for f in files:
        for offset, length in data_extents(f.name, f.size) if f.maybe_sparse else [(0, f.size)]:
            start = -(-offset // ALIGNMENT) * ALIGNMENT
            end = min(offset + length, start + max(0, wanted_bytes - total)) // ALIGNMENT * ALIGNMENT
            if end > start:
                found.append((f.name, start, end))
                total += end - start
        if total >= wanted_bytes:
            break
    return found


def data_bytes(parts: Sequence[Segment]) -> int:
    return sum(end - start for _, start, end in parts)
