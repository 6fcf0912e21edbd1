"""The dataset the loader reads: files sampled under ``path``, one file per sample, read cold.

A sample is read as a DataLoader worker's ``open(path).read()`` would, but from the device:
O_DIRECT into an aligned buffer, else the file's cached pages dropped first
(``io.uncached``). ``decode="image"`` then decodes it with Pillow (an optional extra:
``pip install train-preflight[image]``) to RGB pixels, so the decoded figure can be set beside
the raw one. ``delay_s`` is the explicit test hook for a deliberately throttled reader: it
sleeps that long per sample, as slow storage would. A file that vanished or turned unreadable
since the walk is a sample of 0 bytes that is not counted (``collate_sizes``), so another
process rewriting the dataset cannot end the measurement.

The walk (``dataset_walk.Walk``) follows symbolic links as the job's ``open()`` does and is
bounded: it stops after ``max_files`` matching files, ``Walk.for_files``' limit on entries or
``seconds`` (a share of the check's timeout, ``Budget.walk_s``), so its time and memory do
not grow with the dataset or with the cost of the filesystem's metadata. A shuffled loader reads any file, and
the walk spreads the files it takes over the tree (one from each class folder in turn), so the files taken
stand for the rest; when it stopped before the end, the figure's note says so (``Walk.note``).
"""

from __future__ import annotations

import fnmatch
import io
import math
import os
import time

from preflight.io.dataset_walk import LOST, DataFile, Walk
from preflight.io.uncached import Bypass, aligned_buffer, read_file



def list_files(path: str, include: str, exclude: str, max_files: int,
               seconds: float = math.inf) -> tuple[list[DataFile], Walk]:
    """Files under ``path`` (as ``dataset_walk.Walk`` finds them) matching the globs, at most ``max_files``,
    and the walk (what it skipped).

    ``include``/``exclude`` are comma-separated fnmatch globs tested against the path
    relative to ``path`` and against the file name ("*.jpg", "train/*").
    """
    includes = [g.strip() for g in include.split(",") if g.strip()] or ["*"]
    excludes = [g.strip() for g in exclude.split(",") if g.strip()]
    walk = Walk.for_files(path, max_files, seconds)

    def wanted(candidate: DataFile) -> bool:
        relative, name = os.path.relpath(candidate.name, path), os.path.basename(candidate.name)
        return _matches(relative, name, includes) and not _matches(relative, name, excludes)

    return walk.take(max_files, wanted), walk  # walk.stopped says when it stopped at max_files


def _matches(relative: str, name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatch(relative, g) or fnmatch.fnmatch(name, g) for g in globs)


class FileSamples:
    """Map-style dataset: sample i is file i, read cold; yields (1, bytes read), or (0, 0) for a file gone."""

    def __init__(self, files: list[DataFile], bypass: Bypass, decode: str = "none", delay_s: float = 0.0) -> None:
        self.files = [f.name for f in files]
        self.bypass, self.decode, self.delay_s = bypass, decode, delay_s
        self.largest = max(f.size for f in files)
        self.buffer = None  # allocated in each worker: an mmap cannot be pickled

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[int, int]:
        if self.buffer is None:
            self.buffer = aligned_buffer(max(self.largest + 1, 1 << 16))
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            size = read_file(self.files[index], self.bypass, self.buffer)
        except LOST:
            return 0, 0
        if self.decode == "image":
            decode_image(bytes(self.buffer[:size]))
        return 1, size


def decode_image(data: bytes) -> int:
    """Decode an encoded image (JPEG, PNG, ...) to RGB pixels with Pillow; returns the pixel bytes.

    Raises:
        ImportError: Pillow is not installed.
        OSError: the bytes are not an image Pillow can read.
    """
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return len(image.convert("RGB").tobytes())


def collate_sizes(batch: list[tuple[int, int]]) -> tuple[int, int]:
    """Collate a batch of file samples into (sample count, byte count); files gone since the walk do not count."""
    return sum(count for count, _ in batch), sum(size for _, size in batch)
