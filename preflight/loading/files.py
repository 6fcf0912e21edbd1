"""The dataset the loader reads: files sampled under ``path``, one file per sample, read cold (loading layer).

Read as a worker's ``open(path).read()``, from the device (``io.uncached``, one aligned buffer per worker);
``decode="image"`` decodes with Pillow; ``delay_s`` is the throttled-reader hook. A file gone, unreadable (EIO) or
undecodable counts no sample and is recorded in the run's dataset. docs/checks.md.
"""

from __future__ import annotations

import io
import os
import re
import statistics
import time
from typing import Sequence

from preflight.io.dataset import Dataset
from preflight.io.dataset_walk import LOST, DataFile, describe_files
from preflight.io.uncached import Bypass, aligned_buffer, read_file
from preflight.units import format_value

BLOCK = 1 << 20  # bytes per device read of a sample file: a worker's read buffer, whatever the file's size

# Formats of many records: a job reads them with the format's own reader, never a whole file as one sample.
CONTAINERS = {
    "h5": "HDF5", "hdf5": "HDF5", "hdf": "HDF5", "nc": "netCDF-4 (HDF5)",
    "parquet": "Parquet", "arrow": "Arrow", "feather": "Arrow (Feather)",
    "mdb": "LMDB", "lmdb": "LMDB", "tfrecord": "TFRecord", "tfrecords": "TFRecord", "rec": "RecordIO",
    "mds": "MosaicML MDS", "beton": "FFCV", "zip": "zip", "tar": "tar", "tar.gz": "tar", "tgz": "tar",
}
LARGE_FILE = 64 << 20  # median file size above which files hold many samples (whole arrays, checkpoints), not one


def not_one_sample_each(files: Sequence[DataFile], where: str, instance: str = "dataloader") -> str:
    """Why ``files`` are containers of many samples (half or more named as ``CONTAINERS``, or a median size above
    ``LARGE_FILE``; issue 21 case 6), with the fix; "" when they are one sample each."""
    kinds = [kind for kind in map(_container, files) if kind]
    if 2 * len(kinds) >= len(files):
        extension, kind = max(set(kinds), key=kinds.count)
        count = kinds.count((extension, kind))
        why = f"{'' if len(files) == 1 else f', {count} of them'} in {kind} (.{extension}), a container of records"
    else:
        median = statistics.median(f.size for f in files)
        if median <= LARGE_FILE:
            return ""
        extension = ""
        why = (f" of {format_value(median / 1e6, 'MB')} median size, above the {LARGE_FILE >> 20} MiB a file read "
               f"whole as one sample can be (whole arrays, checkpoints and archives hold many samples)")
    shards = (f"if they are WebDataset shards, set {instance}.format: tar; else "
              if extension in ("tar", "tar.gz", "tgz") else "")
    return (f"{where} holds {describe_files(files)}{why}, not one sample per file: a samples/s of whole files is "
            f"not the job's: {shards}measure the job's own reader with {instance}.dataset: \"package.module:factory\" "
            f"(a Dataset over these files)")


def _container(file: DataFile) -> tuple[str, str] | None:
    """(extension, format) of ``file`` when its name says it is a container of records (``CONTAINERS``)."""
    base = re.sub(r"-\d+-of-\d+$", "", os.path.basename(file.name).lower())  # train.tfrecord-00001-of-01024
    return next(((extension, kind) for extension, kind in CONTAINERS.items() if base.endswith("." + extension)), None)


class FileSamples:
    """Map-style dataset: sample i is file i, read cold; yields (1, bytes read), or (0, 0) for a file gone. One
    aligned buffer per worker (``read_file``); only ``decode="image"`` keeps a file's bytes."""

    def __init__(self, files: list[DataFile], bypass: Bypass, decode: str = "none", delay_s: float = 0.0,
                 dataset: Dataset | None = None) -> None:
        self.files = [f.name for f in files]
        self.bypass, self.decode, self.delay_s = bypass, decode, delay_s
        self.dataset = dataset  # the run's: its pass records each file opened, and each that failed
        self.buffer = None  # allocated in each worker: an mmap cannot be pickled

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[int, int]:
        if self.buffer is None:
            self.buffer = aligned_buffer(BLOCK)
        if self.delay_s:
            time.sleep(self.delay_s)
        kept = bytearray() if self.decode == "image" else None
        name = self.files[index]
        try:
            size = read_file(name, self.bypass, self.buffer, kept, self.dataset)
        except LOST:
            return 0, 0
        except OSError as error:  # EIO: the job's worker raises here; counted and named, the pass goes on
            self._failed(name, f"cannot be read: {error.strerror or error}")
            return 0, 0
        if kept is not None:
            try:
                decode_image(kept)
            except ImportError:
                raise  # no Pillow: the check's error, said once, not a fault of each sample
            except Exception as error:  # noqa: BLE001  whatever Pillow refuses a sample with, the job's worker raises
                # there: OSError, ValueError, SyntaxError, struct.error, DecompressionBombError (an Exception only:
                # junyanz/pytorch-CycleGAN-and-pix2pix#1592)
                self._failed(name, f"cannot be decoded: {type(error).__name__}: {error}")
                return 0, 0
        return 1, size

    def _failed(self, name: str, why: str) -> None:
        if self.dataset is not None:
            self.dataset.record_failure(name, why)


def decode_image(data: bytes | bytearray) -> int:
    """Decode an encoded image (JPEG, PNG, ...) to RGB pixels with Pillow; returns the pixel bytes.

    Raises:
        ImportError: Pillow is not installed.
        OSError: the bytes are not an image Pillow can read.
        PIL.Image.DecompressionBombError: the header declares more than twice ``Image.MAX_IMAGE_PIXELS``.
    """
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return len(image.convert("RGB").tobytes())


def collate_sizes(batch: list[tuple[int, int]]) -> tuple[int, int]:
    """Collate a batch of file samples into (sample count, byte count); files gone since the walk do not count."""
    return sum(count for count, _ in batch), sum(size for _, size in batch)
