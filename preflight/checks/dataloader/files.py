"""The dataset the loader reads: files sampled under ``path``, one file per sample, read cold.

A sample is read as a DataLoader worker's ``open(path).read()`` would, but from the device:
O_DIRECT into an aligned buffer, else the file's cached pages dropped first
(``io_uncached``). ``decode="image"`` then decodes it with Pillow (an optional extra:
``pip install preflight[image]``) to RGB pixels, so the decoded figure can be set beside
the raw one. ``delay_s`` is the explicit test hook for a deliberately throttled reader: it
sleeps that long per sample, as slow storage would.
"""

from __future__ import annotations

import fnmatch
import io
import os
import random
import time

from preflight.io_uncached import Bypass, aligned_buffer, read_file
from preflight.dataset_walk import dataset_files

WALK_FACTOR = 10  # look at up to 10x max_files entries, then sample max_files of them


def list_files(path: str, include: str, exclude: str, max_files: int, seed: int = 0) -> list[str]:
    """Files under ``path`` (as ``dataset_walk`` finds them) matching the globs, sampled to ``max_files``.

    ``include``/``exclude`` are comma-separated fnmatch globs tested against the path
    relative to ``path`` and against the file name ("*.jpg", "train/*"). When more than
    ``max_files`` match, a seeded random sample is kept (a shuffled loader reads any file).
    """
    includes = [g.strip() for g in include.split(",") if g.strip()] or ["*"]
    excludes = [g.strip() for g in exclude.split(",") if g.strip()]
    found: list[str] = []
    for candidate in dataset_files(path):
        relative, name = os.path.relpath(candidate.name, path), os.path.basename(candidate.name)
        if _matches(relative, name, includes) and not _matches(relative, name, excludes):
            found.append(candidate.name)
            if len(found) >= max_files * WALK_FACTOR:
                break
    if len(found) > max_files:
        found = sorted(random.Random(seed).sample(found, max_files))
    return found


def _matches(relative: str, name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatch(relative, g) or fnmatch.fnmatch(name, g) for g in globs)


class FileSamples:
    """Map-style dataset: sample i is file i, read cold; yields (1, bytes read)."""

    def __init__(self, files: list[str], bypass: Bypass, decode: str = "none", delay_s: float = 0.0) -> None:
        self.files, self.bypass, self.decode, self.delay_s = files, bypass, decode, delay_s
        self.largest = max(os.path.getsize(f) for f in files)
        self.buffer = None  # allocated in each worker: an mmap cannot be pickled

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[int, int]:
        if self.buffer is None:
            self.buffer = aligned_buffer(max(self.largest + 1, 1 << 16))
        if self.delay_s:
            time.sleep(self.delay_s)
        size = read_file(self.files[index], self.bypass, self.buffer)
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
    """Collate a batch of file samples into (sample count, byte count)."""
    return len(batch), sum(size for _, size in batch)
