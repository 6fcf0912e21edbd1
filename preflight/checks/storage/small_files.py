"""The ImageNet-style pattern: open, read whole, close, many small files, cold each time (checks layer).

A worker's ``open(path).read()`` per file, uncached, in processes x threads (``io.parallel``), reported as files/s and
MB/s as MLPerf Storage/DLIO do; each file read at most once (``io.dataset``), a file gone counted.
"""

from __future__ import annotations

import time
from array import array
from typing import Callable, Sequence

from preflight.io.dataset_walk import LOST, DataFile
from preflight.io.parallel import Tally
from preflight.io.dataset import Dataset
from preflight.io.uncached import Bypass, aligned_buffer, read_file


def file_loop(files: Sequence[DataFile], loops: int, bypass: Bypass,
              dataset: Dataset | None = None) -> Callable[[int], Callable[[float], Tally]]:
    """A loop factory: loop i reads files i, i+loops, i+2*loops ... once each, until the deadline or its last;
    each open is recorded in the run's ``dataset``."""
    largest = max(f.size for f in files)

    def make(index: int) -> Callable[[float], Tally]:
        mine = [f.name for f in files[index::loops]]  # none for a loop beyond the files: it reads nothing again
        buffer = aligned_buffer(max(largest + 1, 1 << 16))  # one read returns the whole file

        def loop(deadline: float) -> Tally:
            start = now = time.perf_counter()
            count = nbytes = lost = 0
            failed: list[str] = []
            for name in mine:
                if now >= deadline:
                    break
                try:
                    nbytes += read_file(name, bypass, buffer, dataset=dataset)
                    count += 1
                except LOST:
                    lost += 1
                except OSError:  # EIO and its kin: the job's read of this sample fails; counted, named, not fatal
                    failed.append(name)
                now = time.perf_counter()
            return Tally(count, nbytes, array("d"), now - start, lost=lost, failed=tuple(failed))

        return loop

    return make
