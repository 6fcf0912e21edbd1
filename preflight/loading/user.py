"""The job's own Dataset (``dataset: "package.module:factory"``), built and counted as the job's loop sees it.

Loading layer. Samples count as the job's DataLoader counts them: the batch sampler's indices (``RecordedBatches``),
an ``IterableDataset``'s first tensor or list (``count_batch``) or ``count_samples``; a repeated batch counts none
(``Replays``, pytorch/pytorch#30599). docs/checks.md (``dataset:``).
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import os
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence

from preflight.checks import usercode
from preflight.checks.base import UserCodeError

Count = Callable[[Any], tuple[int, int]]  # batch -> (samples, bytes)


class Job(NamedTuple):
    """The job's Dataset and how its loop batches and counts it."""

    dataset: Any
    collate: Callable[..., Any] | None  # None: torch's default_collate
    count_samples: Count | None  # the job's count of a batch's samples (``theirs``); None: ours (``batching``)
    sampler: Any = None  # the job's sampler (``sampler``: its factory called with the dataset); None: shuffle's
    loader: Any = None  # the job's own DataLoader (``loader``), measured as it is; None: one built from the options
    footprint: int | None = None  # bytes of anonymous memory building the dataset took here: what a worker could
    # copy of it (``memory.Saturation.bound``); None: not read (no smaps_rollup)


class Uncountable(Exception):
    """A batch whose samples cannot be counted from what it holds: the one-line reason, with the fix."""


def build(options: Mapping[str, Any]) -> Job:
    """The dataset ``options`` names, its collate function and sample count; call under ``usercode.on_path``.

    Raises:
        UserCodeError: the factory, collate_fn or count_samples cannot be imported or called, or the
            factory's value is not a Dataset (or a map-style one without ``__len__``). Never iterates the dataset.
    """
    import torch.utils.data

    from preflight.loading.footprint import memory

    spec = options["dataset"]
    before = memory.rollup(os.getpid())
    dataset = usercode.call(spec, "dataset", options["dataset_args"], torch.utils.data.Dataset,
                            "a torch.utils.data.Dataset or IterableDataset")
    after = memory.rollup(os.getpid())
    footprint = max(0, after.anonymous - before.anonymous) if before is not None and after is not None else None
    if not isinstance(dataset, torch.utils.data.IterableDataset) and not hasattr(dataset, "__len__"):
        raise UserCodeError("dataset", f"{spec}(**dataset_args) returned a map-style {type(dataset).__name__} without "
                            f"__len__, which a DataLoader's sampler needs: define __len__, or subclass IterableDataset")
    collate = usercode.load(options["collate_fn"], "collate_fn") if options["collate_fn"] else None
    counting = options["count_samples"]
    sampler = _sampler(options, dataset) if options.get("sampler") else None
    return Job(dataset, collate, theirs(usercode.load(counting, "count_samples"), counting) if counting else None,
               sampler, footprint=footprint)


def _sampler(options: Mapping[str, Any], dataset: Any) -> Any:
    """The job's sampler: ``sampler``'s factory called with ``dataset``; an iterable of indices with ``__len__``.

    Raises:
        UserCodeError: the factory cannot be imported, raises, or returns no sampler (or one for an IterableDataset,
            which has no indices to sample).
    """
    spec = options["sampler"]
    if iterable(dataset):
        raise UserCodeError("sampler", f"{options['dataset']} returned an IterableDataset, which has no indices to "
                            f"sample: remove sampler (the stream sets its own order)")
    factory = usercode.load(spec, "sampler")
    try:
        sampler = factory(dataset)
    except Exception as error:  # noqa: BLE001  whatever the job's factory raises
        raise UserCodeError("sampler", f"{spec}(dataset) raised {usercode.blame(error)}: fix the factory") from None
    if not hasattr(sampler, "__iter__") or not hasattr(sampler, "__len__"):
        kind = type(sampler)
        raise UserCodeError("sampler", f"{spec}(dataset) returned {kind.__module__}.{kind.__qualname__}, not a "
                            f"torch Sampler (an iterable of indices with __len__): name the factory that returns "
                            f"the job's sampler")
    return sampler


def check_user_code(options: Mapping[str, Any]) -> None:
    """``preflight validate``: build the dataset (collate_fn, count_samples, sampler) once, never iterating it; import
    worker_init_fn; under spawn or forkserver, pickle what each worker would receive
    (``settings.refuse_unpicklable``), so the job's first-batch failure is told at the config's line.

    Raises:
        UserCodeError: as ``build``; on ``in_order`` where this torch lacks it; on the option naming an object that
            cannot be pickled.
    """
    from preflight.loading import settings
    from preflight.host.cpus import auto_workers

    settings.refuse_unsupported(options)
    with usercode.on_path(options["python_path"]):
        init = settings.worker_init(options)
        if not options["dataset"]:
            return
        job = build(options)
        workers = auto_workers() if options["num_workers"] == "auto" else int(options["num_workers"])
        settings.refuse_unpicklable(options, workers, {"dataset": job.dataset, "collate_fn": job.collate,
                                                       "worker_init_fn": init})


def iterable(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``torch.utils.data.IterableDataset`` (no sampler, no shuffle)."""
    import torch.utils.data

    return isinstance(dataset, torch.utils.data.IterableDataset)


def batching(job: Job, batch_size: int, replays: Replays | None = None, *, shuffle: bool = True,
             drop_last: bool = False, generator: Any = None, first_pass: Any = None) -> tuple[dict[str, Any], Count]:
    """The DataLoader's batching arguments for ``job`` and how to count its batches (call once per DataLoader): a
    map-style Dataset through ``RecordedBatches`` over the job's sampler, a shuffle (``first_pass``) or order; an
    IterableDataset through ``replays`` when given."""
    import torch.utils.data

    if iterable(job.dataset):
        arguments: dict[str, Any] = {"batch_size": batch_size, "drop_last": drop_last}
        count = job.count_samples or from_batch(batch_size)
        return arguments, replays.counting(count) if replays is not None else count
    sampler = job.sampler or first_pass
    if sampler is None:
        sampler = (torch.utils.data.RandomSampler(job.dataset, generator=generator) if shuffle
                   else torch.utils.data.SequentialSampler(job.dataset))
    batches = RecordedBatches(sampler, batch_size, drop_last)
    return {"batch_sampler": batches}, job.count_samples or batches.count


class Replays:
    """The batches of an IterableDataset read by several workers that repeat an earlier batch exactly.

    A worker that does not shard with ``get_worker_info()`` delivers every sample once per worker
    (pytorch/pytorch#30599). A fingerprint (each tensor's shape, dtype, first and last 4 KiB; other leaves' ``repr``)
    is kept for the last ``REMEMBERED`` batches, one record for every DataLoader of a measurement. A stream that
    shards and then starts over (webdataset/webdataset#269) repeats only after every worker delivered new batches:
    that is the end of its first pass, and the count raises ``io.dataset.Spent``.
    """

    REMEMBERED = 65536

    def __init__(self, workers: int = 2) -> None:
        self.seen: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.batches = self.repeated = 0
        self.workers = workers
        self.started_over = 0  # the distinct batches before the stream started over; 0 while it has not

    def counting(self, count: Count) -> Count:
        """``count``, except that a batch seen before counts 0 samples (its bytes still count: they were moved)."""

        def counted(batch: Any) -> tuple[int, int]:
            samples, nbytes = count(batch)
            if not self._repeats(batch):
                return samples, nbytes
            if self.repeated == 1 and self.batches - 1 >= self.workers:  # every worker's first batch was new
                self.started_over = self.batches - 1
            if self.started_over:
                from preflight.io.dataset import Spent

                raise Spent(f"the stream started over after {self.started_over} batches (a repeated or resampled "
                            f"IterableDataset): its first pass is the job's first epoch")
            return 0, nbytes

        return counted

    def note(self, workers: int) -> str:
        """The row's note when any batch repeated: how many, and the fix; "" when none did."""
        if not self.repeated or self.started_over:
            return ""
        return (f"{self.repeated} of {self.batches} batches repeated an earlier batch exactly and counted no sample: "
                f"an IterableDataset read by {workers} workers yields its whole stream in each unless it shards it "
                f"with torch.utils.data.get_worker_info() (pytorch/pytorch#30599); the figure is distinct samples")

    def _repeats(self, batch: Any) -> bool:
        import hashlib

        digest = hashlib.blake2b(digest_size=16)
        for leaf in _leaves(batch):
            digest.update(_leaf_bytes(leaf))
        key = digest.digest()
        self.batches += 1
        if key in self.seen:
            self.repeated += 1
            self.seen.move_to_end(key)
            return True
        self.seen[key] = None
        if len(self.seen) > self.REMEMBERED:
            self.seen.popitem(last=False)
        return False


def counted_by(job: Job, spec: str) -> str:
    """How ``batching`` counts ``job``'s samples, for the method column (``spec``: count_samples)."""
    if spec:
        return f"samples counted by count_samples={spec}"
    if iterable(job.dataset):
        return ("samples counted from each batch: its first tensor's first dimension, else its first list's length "
                "(an IterableDataset has no batch sampler)")
    return "samples counted from the batch sampler's indices"


class RecordedBatches:
    """torch's ``BatchSampler(sampler, batch_size, drop_last)``, recording how many indices each batch holds; batches
    come back in draw order (``in_order=True``), so ``count`` pops the i-th for the i-th. With ``in_order: false``
    only an overtaken short last batch miscounts, once an epoch."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool = False) -> None:
        import torch.utils.data

        self.batches: Any = torch.utils.data.BatchSampler(sampler, batch_size, drop_last=drop_last)
        self.sizes: collections.deque[int] = collections.deque()

    @classmethod
    def of(cls, batches: Any) -> RecordedBatches:
        """The job's own batch sampler ``batches`` (any iterable of index lists with ``__len__``), recorded."""
        recorded = cls.__new__(cls)
        recorded.batches, recorded.sizes = batches, collections.deque()
        return recorded

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        self.sizes.clear()  # here, not in the generator: torch calls iter() before it draws any batch
        return self._recorded()

    def _recorded(self) -> Iterator[list[int]]:
        for indices in self.batches:
            self.sizes.append(len(indices))
            yield indices

    def count(self, batch: Any) -> tuple[int, int]:
        """(samples, bytes) of the next batch the DataLoader returned: its recorded indices, its tensors' bytes."""
        if not self.sizes:
            raise RuntimeError("a DataLoader returned a batch its batch sampler never drew: the batches are counted "
                               "out of order (in_order=False?)")
        return self.sizes.popleft(), tensor_bytes(batch)


def from_batch(batch_size: int) -> Count:
    """``count_batch`` for batches that cannot hold more than ``batch_size`` samples (an IterableDataset's): a count
    above that (a time-major T x B batch read as T) is ``Uncountable``, so the figure is unmeasurable rather than
    wrong."""

    def count(batch: Any) -> tuple[int, int]:
        samples, nbytes = count_batch(batch)
        if samples > batch_size:
            raise Uncountable(f"a batch reads as {samples} samples (its first tensor's first dimension, else its "
                              f"first list's length), more than batch_size={batch_size} can hold: the collate is "
                              f"not sample-major (time-major T x B, packed tokens) and an IterableDataset has no "
                              f"batch sampler to count: name the job's count, count_samples: "
                              f"\"package.module:function\" (batch -> samples)")
        return samples, nbytes

    return count


def theirs(function: Callable[[Any], Any], spec: str) -> Count:
    """The job's ``function`` (count_samples, ``spec``) as a count: its number of samples, a whole number >= 0
    (else a ``UserCodeError`` naming it), and the tensors' bytes."""

    def count(batch: Any) -> tuple[int, int]:
        try:
            samples = function(batch)
        except Exception as error:  # noqa: BLE001  whatever the job's count raises
            raise UserCodeError("count_samples", f"{spec}(batch) raised {usercode.blame(error)}: fix the "
                                f"function") from None
        try:
            whole = operator.index(samples)
        except TypeError:
            whole = -1
        if whole < 0:
            raise UserCodeError("count_samples", f"{spec}(batch) returned {samples!r:.40}, not a number of "
                                f"samples: return an int >= 0 (len(batch[\"ids\"]), batch.shape[1])")
        return whole, tensor_bytes(batch)

    return count


def count_batch(batch: Any) -> tuple[int, int]:
    """(samples, bytes) in a collated batch, from the batch alone: the first tensor's first dimension (depth first, as
    torch's default collate stacks along 0), else the first list's length; and every tensor's nbytes.

    Raises:
        Uncountable: the batch holds neither a tensor nor a list (say what collate_fn returns).
    """
    tensors = list(_tensors(batch))
    if tensors:
        first = tensors[0]
        return (int(first.shape[0]) if first.dim() else 1), sum(t.element_size() * t.nelement() for t in tensors)
    length = _first_length(batch)
    if length is None:
        raise Uncountable(f"cannot count the samples in a batch of {type(batch).__name__}: make collate_fn return "
                          f"tensors (the first dimension is the batch) or a list of samples, or name the job's "
                          f"count, count_samples: \"package.module:function\" (batch -> samples)")
    return length, 0


def tensor_bytes(batch: Any) -> int:
    """Bytes of every tensor in ``batch`` (strings and other objects: 0)."""
    return sum(t.element_size() * t.nelement() for t in _tensors(batch))


def _first_length(value: Any) -> int | None:
    """The length of the first list in ``value`` (a list itself, or a dict's first value, depth first); None if none."""
    if isinstance(value, Mapping):
        return next((n for n in map(_first_length, value.values()) if n is not None), None)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return len(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return next((n for n in (_first_length(getattr(value, f.name)) for f in dataclasses.fields(value))
                     if n is not None), None)
    return None


def _leaves(value: Any) -> Iterator[Any]:
    """Every leaf of a collated batch (tensors, strings, numbers), depth first."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield key
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _leaves(getattr(value, field.name))
    else:
        yield value


def _leaf_bytes(leaf: Any) -> bytes:
    """What ``Replays`` hashes of one leaf: a tensor's shape, dtype and first and last 4 KiB; else its repr."""
    import torch

    if not isinstance(leaf, torch.Tensor):
        return repr(leaf)[:256].encode("utf-8", "replace")
    flat = leaf.detach().reshape(-1).cpu()  # reshape copies a non-contiguous tensor: contiguous either way
    raw = flat.view(torch.uint8) if flat.dtype != torch.bool and flat.numel() else flat.to(torch.uint8)
    return f"{tuple(leaf.shape)} {leaf.dtype}".encode() + raw[:4096].numpy().tobytes() + raw[-4096:].numpy().tobytes()


def _tensors(value: Any) -> Iterator[Any]:
    """Every tensor in a collated batch, depth first (``_leaves``)."""
    import torch

    return (leaf for leaf in _leaves(value) if isinstance(leaf, torch.Tensor))