"""The dataset the loader reads with ``format: tar``: WebDataset shards, streamed, one sample per key (loading layer).

WebDataset's format (https://github.com/webdataset/webdataset#the-webdataset-format: adjacent members sharing a
``base_plus_ext`` key); each worker streams its own shards from the device. A key counts once per shard even when
ungrouped (webdataset/webdataset#140); a damaged shard, as tar(1) would say (and without end-of-archive blocks, which
``tarfile`` ignores), counts its samples up to the damage.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import posixpath
import tarfile
import time
import zlib
from typing import Iterator, NamedTuple, Sequence

import torch.utils.data  # this module is imported only when the check measures (see measuring)

from preflight.io.dataset import Dataset
from preflight.io.dataset_walk import LOST, DataFile
from preflight.io.uncached import Bypass, aligned_buffer, open_uncached
from preflight.loading.files import decode_image

CHUNK = 1 << 20  # bytes per device read: a sequential stream, as fio's --bs=1M
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
END_OF_ARCHIVE = 1024  # two zero blocks of 512 bytes (POSIX.1-2001, ustar)
DAMAGE = (tarfile.TarError, EOFError, zlib.error, OSError)  # what reading a damaged or vanished shard raises


class ShardError(Exception):
    """A shard that cannot be read to its end: its name and what tar would say about it."""


UNDECODABLE = "its image cannot be decoded"  # in a problem item's text: Pillow refused the sample's image


class ShardItem(NamedTuple):
    """What the dataset yields per run of a key's members: a sample counted, more of one, or a problem."""

    samples: int  # 1 for a sample delivered, 0 for more members of a sample counted already or a problem report
    bytes: int  # payload bytes of the run's members (tar headers and padding not counted)
    key: str  # "SHARD:KEY" (shard base name), unique over the dataset
    problem: str  # "" or "SHARD: what is wrong"
    ungrouped: str = ""  # on a shard's first key seen again: "SHARD: key KEY seen again after other keys"


class ShardBatch(NamedTuple):
    """A collated batch of ``ShardItem``s (``collate_items``): what the loader delivered, and what went wrong."""

    samples: int
    bytes: int
    keys: tuple[str, ...]  # of the samples counted
    damaged: tuple[str, ...]  # "SHARD: what is wrong", a shard read up to its damage
    incomplete: tuple[str, ...]  # "SHARD: sample KEY has no image member ...", a sample not counted
    ungrouped: tuple[str, ...]  # "SHARD: key KEY seen again after other keys", a shard whose keys are not grouped


class Sample(NamedTuple):
    """One run of a key's adjacent members, as webdataset's ``group_by_keys`` yields it: its key and members' bytes."""

    key: str
    members: dict[str, bytes]  # extension (after the key's dot, lower case) -> bytes
    again: bool = False  # the key had members earlier in this shard, before other keys: more of that sample


def split_key(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member path by WebDataset's ``base_plus_ext``, or None when the base name has no dot or
    is hidden: ``train/n0001_12.seg.png`` -> ``("train/n0001_12", "seg.png")``."""
    directory, base = posixpath.split(name)
    if "." not in base or base.startswith("."):
        return None
    stem, extension = base.split(".", 1)
    return posixpath.join(directory, stem), extension.lower()


class _DeviceStream:
    """A file read front to back in ``CHUNK`` blocks into an aligned buffer (O_DIRECT-safe); ``read(n)`` as a file."""

    def __init__(self, name: str, bypass: Bypass, buffer: mmap.mmap, dataset: Dataset | None = None) -> None:
        self.fd = open_uncached(name, bypass, dataset)
        self.buffer, self.offset = buffer, 0  # offset: the file position of the next device read
        self.pending = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        parts, wanted = [], size if size >= 0 else 1 << 62
        while wanted > 0:
            if not self.pending:
                got = os.preadv(self.fd, [self.buffer], self.offset)
                if got == 0:
                    break
                self.offset += got
                self.pending = memoryview(self.buffer)[:got]
            part = self.pending[:wanted]
            parts.append(bytes(part))
            self.pending, wanted = self.pending[len(part):], wanted - len(part)
        return b"".join(parts)

    def close(self) -> None:
        self.pending = memoryview(b"")
        os.close(self.fd)


def read_shard(name: str, bypass: Bypass, buffer: mmap.mmap, dataset: Dataset | None = None) -> Iterator[Sample]:
    """The runs of each key's adjacent members in shard ``name``, in stored order, read from the device (``buffer``:
    an aligned ``CHUNK``); a key seen again after others comes back with ``again`` set. The open is recorded in the
    run's ``dataset``.

    Raises:
        ShardError: the shard is damaged or vanished; the samples yielded before stay valid, the one being read is
            dropped.
    """
    stream = None
    try:
        stream = _DeviceStream(name, bypass, buffer, dataset)
        # tarfile's default bufsize, as webdataset's: 1 MiB ran at half the rate (bench/loose_vs_shards.py)
        with tarfile.open(fileobj=stream, mode="r|*") as tar:  # type: ignore[call-overload]
            current: Sample | None = None
            seen: set[str] = set()  # this shard's keys so far
            for member in tar:
                split = split_key(member.name) if member.isreg() else None
                if split is None:
                    continue
                if current is None or current.key != split[0]:  # a new key: the previous sample is whole
                    if current is not None:
                        yield current
                    current = Sample(split[0], {}, split[0] in seen)
                    seen.add(split[0])
                current.members[split[1]] = tar.extractfile(member).read()  # type: ignore[union-attr]
            _check_end(name, tar)
            if current is not None:
                yield current
    except ShardError:
        raise
    except DAMAGE as error:
        raise ShardError(f"{os.path.basename(name)}: {_words(error)}") from None
    finally:
        if stream is not None:
            stream.close()


def count_samples(names: Sequence[str], enough: int) -> tuple[int, str]:
    """The samples in shards ``names`` counted from their tar headers alone (payloads seeked over, until ``enough``),
    and the first damage met (""); read through the opener, not recorded: the streaming is the pass."""
    samples, problem = 0, ""
    for name in names:
        keys: set[str] = set()
        with contextlib.ExitStack() as opened:
            try:
                raw = opened.enter_context(os.fdopen(open_uncached(name, "none"), "rb"))
                tar = opened.enter_context(tarfile.open(fileobj=raw, mode="r:*"))
            except tarfile.ReadError:  # tarfile's own words list every compression it tried, over five lines
                problem = problem or f"{os.path.basename(name)}: not a tar archive, plain or compressed"
                continue
            except DAMAGE as error:
                problem = problem or f"{os.path.basename(name)}: {_words(error)}"
                continue
            try:
                for member in tar:
                    split = split_key(member.name) if member.isreg() else None
                    if split is not None:
                        keys.add(split[0])
                    if samples + len(keys) >= enough:
                        break
            except DAMAGE as error:
                problem = problem or f"{os.path.basename(name)}: {_words(error)}"
        samples += len(keys)
        if samples >= enough:
            break
    return samples, problem


def _check_end(name: str, tar: tarfile.TarFile) -> None:
    """Raise ShardError when an uncompressed shard stops before tar's end-of-archive blocks (see module doc)."""
    if getattr(tar.fileobj, "comptype", "tar") != "tar":
        return  # a compressed stream's own end check (gzip's trailer) catches a cut shard
    end = tar.offset  # where the member headers stopped
    fd = open_uncached(name, "none")  # 1 KiB at any 512-byte offset: no O_DIRECT alignment to meet
    try:
        tail = os.pread(fd, END_OF_ARCHIVE, end)
    finally:
        os.close(fd)
    if len(tail) < END_OF_ARCHIVE:
        raise ShardError(f"{os.path.basename(name)}: ends at byte {end + len(tail)} without tar's end-of-archive "
                         f"blocks: truncated")
    if tail.strip(b"\0"):
        raise ShardError(f"{os.path.basename(name)}: invalid tar header at byte {end}: corrupt")


def _words(error: BaseException) -> str:
    if isinstance(error, LOST):
        return f"{error.strerror or type(error).__name__} (gone or unreadable since the walk)"
    return str(error) or type(error).__name__


class ShardSamples(torch.utils.data.IterableDataset):
    """IterableDataset of WebDataset shards, one ``ShardItem`` per run of a key's members.

    ``(1, bytes, key, "")`` for a sample, ``(0, bytes, key, "")`` for a later run of a counted key,
    ``(0, 0, "", "SHARD: ...")`` after a damaged shard's good samples. With ``decode="image"`` a sample counts at the
    run holding its image member, decoded with Pillow; one without an image, or whose image Pillow refuses
    (webdataset/webdataset#206), is a problem item. Bytes are payload only; ``delay_s`` sleeps per sample (test hook).

    Raises (from iteration, in the worker): ImportError when Pillow is missing.
    """

    def __init__(self, shards: Sequence[DataFile], bypass: Bypass, decode: str = "none",
                 delay_s: float = 0.0, dataset: Dataset | None = None) -> None:
        self.shards = [s.name for s in shards]
        self.bypass, self.decode, self.delay_s = bypass, decode, delay_s
        self.dataset = dataset  # the run's, whose pass records each shard opened
        self.buffer = None  # allocated in each worker: an mmap cannot be pickled

    def mine(self) -> list[str]:
        """The shards this DataLoader worker reads: every W-th from its id (all of them outside a worker)."""
        info = torch.utils.data.get_worker_info()
        return self.shards if info is None else self.shards[info.id::info.num_workers]

    def __iter__(self) -> Iterator[ShardItem]:
        if self.buffer is None:
            self.buffer = aligned_buffer(CHUNK)
        for name in self.mine():
            yield from self._shard(name)

    def _shard(self, name: str) -> Iterator[ShardItem]:
        shard, ungrouped = os.path.basename(name), False
        waiting: dict[str, None] = {}  # with decode: keys whose members so far hold no image
        try:
            for sample in read_shard(name, self.bypass, self.buffer, self.dataset):  # type: ignore[arg-type]
                item = self._item(shard, sample, waiting)
                if sample.again and not ungrouped:
                    ungrouped = True
                    item = item._replace(ungrouped=f"{shard}: key {sample.key} seen again after other keys")
                yield item
        except ShardError as error:
            yield ShardItem(0, 0, "", str(error))
        for key in waiting:  # known only at the shard's end: an ungrouped shard may hold the image further on
            yield ShardItem(0, 0, f"{shard}:{key}", f"{shard}: sample {key} has no image member "
                            f"({', '.join(IMAGE_EXTENSIONS)}): not counted")

    def _item(self, shard: str, sample: Sample, waiting: dict[str, None]) -> ShardItem:
        """The item for one run of ``sample.key``'s members: the sample counted at its first run (with decode: at
        the run holding its image, decoded), every run's bytes counted."""
        key, size = f"{shard}:{sample.key}", sum(len(data) for data in sample.members.values())
        if sample.again and sample.key not in waiting:
            return ShardItem(0, size, key, "")  # more members of a sample counted already
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.decode != "image":
            return ShardItem(1, size, key, "")
        image = next((sample.members[e] for e in IMAGE_EXTENSIONS if e in sample.members), None)
        if image is None:
            waiting[sample.key] = None
            return ShardItem(0, size, key, "")
        waiting.pop(sample.key, None)
        try:
            decode_image(image)
        except ImportError:
            raise
        except Exception as error:  # noqa: BLE001  whatever Pillow refuses a sample with (files.FileSamples)
            return ShardItem(0, size, key, f"{shard}: sample {sample.key}: its image cannot be decoded "
                             f"({type(error).__name__}: {error})")
        return ShardItem(1, size, key, "")


def collate_items(batch: list[ShardItem]) -> ShardBatch:
    """Collate ``ShardItem``s into a ``ShardBatch``: sample count, payload bytes, the samples' keys, and the
    problems (a damaged shard has no key; a sample without an image member has one). Runs in the worker."""
    problems = [i for i in batch if i.problem]
    return ShardBatch(sum(i.samples for i in batch), sum(i.bytes for i in batch),
                      tuple(i.key for i in batch if i.samples), tuple(i.problem for i in problems if not i.key),
                      tuple(i.problem for i in problems if i.key), tuple(i.ungrouped for i in batch if i.ungrouped))


class ShardTally:
    """``BatchPuller``'s ``count``: (samples, bytes) of a ``ShardBatch``, keeping the problems it carried.

    Each problem is kept once however many epochs repeat it, at most ``KEEP`` of each kind.
    """

    KEEP = 1000

    def __init__(self) -> None:
        self.damaged: dict[str, None] = {}  # insertion-ordered sets
        self.incomplete: dict[str, None] = {}
        self.ungrouped: dict[str, None] = {}

    def __call__(self, batch: ShardBatch) -> tuple[int, int]:
        for kept, found in ((self.damaged, batch.damaged), (self.incomplete, batch.incomplete),
                            (self.ungrouped, batch.ungrouped)):
            for problem in found:
                if len(kept) < self.KEEP:
                    kept[problem] = None
        return batch.samples, batch.bytes

    def note(self, shards: int, read_all: bool) -> str:
        """The problems in words for the report's note, "" when none: how many, and the first of each kind;
        ``read_all`` false says the count is of the shards the measuring time read."""
        def of(count: int) -> str:
            return f"{count} of {shards} shards" if read_all else \
                f"{count} of the shards read in the measuring time (not all {shards})"

        parts = []
        if self.damaged:
            parts.append(f"{of(len(self.damaged))} damaged, read up to the damage "
                         f"(first: {next(iter(self.damaged))})")
        undecodable = [problem for problem in self.incomplete if UNDECODABLE in problem]
        incomplete = [problem for problem in self.incomplete if UNDECODABLE not in problem]
        if undecodable:
            parts.append(f"{len(undecodable)} samples whose image cannot be decoded, not counted "
                         f"(first: {undecodable[0]})")
        if incomplete:
            parts.append(f"{len(incomplete)} samples without an image member not counted (first: {incomplete[0]})")
        if self.ungrouped:
            parts.append(f"{of(len(self.ungrouped))} ungrouped, each key counted once as one sample "
                         f"(first: {next(iter(self.ungrouped))}): webdataset yields each run of a key's members as a "
                         f"sample of its own (webdataset#140); write each sample's members together")
        return "; ".join(parts)
