"""What a DataLoader reads and the loader itself, built from the dataloader options: one place for both checks.

``opened(options)`` decides what the loader reads, as the dataloader check's docstring says: the
job's own Dataset (``dataset``), synthetic samples (``synthetic``), the files under ``path``
(WebDataset tar shards with ``format: tar``, ``shards``), or an ImageNet-shaped scratch set
beside a path with too few files; it yields a ``Source``, or the one-line reason nothing can be
read: among them, files that are containers of many samples (``files.not_one_sample_each``:
HDF5, Parquet, LMDB, TFRecord..., or a median file above 64 MiB), whose samples/s read whole is
not the job's. It is a context manager because a scratch set lives only while it is read, and
because an exception the job's Dataset raises while the block runs is re-worded there to name
the job's frames (``usercode.UserCodeRaised``). ``loader_for(options, source)`` builds the
``torch.utils.data.DataLoader`` with the job's settings, and ``Loader.fresh()`` another over the
same data: a fresh pool of workers, with how to count its batches' samples (``Counted``: the job's
as its DataLoader counts them, ``user.batching``). The ``dataloader`` check measures the loader
alone; the ``pipeline`` check feeds its batches to the model's training step; both count a batch
with the same ``Counted.count``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence

from preflight.checks import dataset_path, subject, usercode
from preflight.checks.base import Budget, UserCodeError
from preflight.loading import cold, settings, shards, user
from preflight.loading.files import FileSamples, collate_sizes, not_one_sample_each
from preflight.loading.sampler import PassSampler
from preflight.loading.loop import sizes_or_tensor
from preflight.host.cpus import auto_workers
from preflight.host.fsinfo import Filesystem, filesystem_of
from preflight.io.dataset_walk import (EXAMPLES, IMAGE_EXTENSIONS, MIN_SAMPLES, SKIPPED, DataFile, Walk, filesystems,
                                       left_out, too_few)
from preflight.io.dataset import Dataset
from preflight.io.scratch import choose_parent, room_for, scratch_dir, write_small_files
from preflight.io.uncached import Bypass

SYNTHETIC_SHAPE = (3, 224, 224)
SCRATCH_SET = (1000, 110_000)  # files, bytes each: ImageNet's median JPEG is about 110 kB


class Source(NamedTuple):
    """What the loader reads: ``files``, else the ``job``'s Dataset (``user.Job``), else synthetic samples."""

    files: list[DataFile] | None
    description: str  # for the method column
    note: str  # what a reader of the table must know (scratch data, skipped files); "" if nothing
    subject: str  # what the samples are (measurement.SUBJECTS), decided by ``opened`` from evidence, never defaulted
    job: user.Job | None = None
    # The job's Dataset's files stayed in the page cache after they were dropped (``cold.verified``): the reading
    # rows are memory's figures (``Measurement.cache_bound``)
    cache_bound: bool = False
    cold: str = ""  # for the method's end: what the page cache held of the job's files, and what was dropped
    data: Dataset | None = None  # the run's dataset (``io.dataset``): its one pass, continued by every loader made


class Counted(NamedTuple):
    """A DataLoader and how to count the batches it returns, in the order it returns them."""

    dataloader: Any
    count: Callable[[Any], tuple[int, int]]  # batch -> (samples, bytes)


class Loader(NamedTuple):
    """How to make DataLoaders over a ``Source``, how to count their batches, and what the report says."""

    method: str
    workers: int
    fs: Filesystem | None  # the files' filesystem; None for synthetic samples and the job's Dataset
    bypass: Bypass | None
    fresh: Callable[[], Counted]  # a new DataLoader with the job's settings (its iterator starts a fresh pool of
    # workers) and the count of its batches, which may follow that DataLoader alone (``user.RecordedBatches``)
    tally: shards.ShardTally | None = None  # tar shards: every DataLoader's count, with the shards' problems
    replays: user.Replays | None = None  # an IterableDataset read by several workers: its repeated batches
    batch_size: int | None = None  # samples per batch the loader asks for (None: the job's loader batches none)
    prefetch_factor: int | None = None  # batches each worker loads ahead (None without workers)
    first_pass: PassSampler | None = None  # files: the one pass every DataLoader of it continues


@contextlib.contextmanager
def opened(options: Mapping[str, Any], budget: Budget, check: str) -> Iterator[Source | str]:
    """Yield what the loader built from ``options`` reads, or why nothing can be read (one line, with the fix).

    The fixes name the instance (``Budget.named``: "set val_loader.path"); the walk for files stops after
    ``Budget.walk_s``; the source continues the run's dataset (``Budget.dataset``), one of its own outside a run.

    Raises:
        usercode.UserCodeRaised: the job's dataset cannot be built, or raised while the block read it.
    """
    instance, data = budget.named(check), budget.with_dataset().dataset
    assert data is not None
    if options.get("loader"):
        with _job_loader(options, instance) as source:
            yield _continuing(source, data)
    elif options["dataset"]:
        with _job_dataset(options, instance) as source:
            yield _continuing(source, data)
    else:
        with usercode.on_path(options["python_path"]), _blamed(instance, "worker_init_fn", ours=True), \
                _ours(options, instance, budget.walk_s, data, budget.requires("mounted")) as source:
            yield _continuing(source, data)


def _continuing(source: Source | str, data: Dataset) -> Source | str:
    """``source`` reading on in the run's dataset ``data``; a reason stays as it is."""
    return source if isinstance(source, str) else source._replace(data=data)


@contextlib.contextmanager
def _ours(options: Mapping[str, Any], instance: str, walk_s: float, data: Dataset,
          mount_required: bool = False) -> Iterator[Source | str]:
    """Synthetic samples, or the files under ``path`` (``_files``) labelled as the dataset or not (``opened``)."""
    if options["synthetic"]:
        shape = "x".join(map(str, synthetic_shape(options)))
        yield Source(None, f"synthetic {shape} float32 samples (measures IPC and collation, not storage)", "",
                     "synthetic")
        return
    options, dataset_named = subject.named(options)
    with _files(options, instance, walk_s, data, dataset_named, mount_required) as source:
        if dataset_named:
            yield source
        elif isinstance(source, str):
            yield f"{subject.no_dataset_fix(instance)} (the working directory: {source})"
        else:
            yield source._replace(subject="no_dataset")


@contextlib.contextmanager
def _files(options: Mapping[str, Any], instance: str, walk_s: float, data: Dataset, named: bool = True,
           mount_required: bool = False) -> Iterator[Source | str]:
    """The files under ``path``, tar shards, or a scratch set beside a path with too few files.

    Without a dataset ``named`` (the working directory), files are stray files, never judged as
    containers: what is measured is labelled ``no_dataset`` by ``opened``, whose fix is to name one.

    Whatever it yields, a figure's note or the reason there is none says what the walk skipped under
    ``path`` and why (issue 21, case 9: a scratch set's note said nothing of a folder the job could
    not read). The files found are the dataset's by evidence: the walk found them where the job's
    ``open()`` lands (``Walk`` follows links onto other filesystems).
    """
    path = options["path"]
    # ConfigMistake where it is the config's (issue 35), unless a `mounted` threshold makes the mount the node's
    missing = dataset_path.reason(path, instance, directory=True, mount_required=mount_required)
    if missing:
        yield missing
        return
    if options["decode"] == "image" and importlib.util.find_spec("PIL") is None:
        yield "decode: image needs Pillow: pip install pillow in this image (or drop decode: image)"
        return
    images = _as_a_folder_of_images(options)
    files, walk = data.files(path, dataset_path.max_files(options), walk_s, options["include"], options["exclude"],
                             IMAGE_EXTENSIONS if images else ())
    skipped, note = walk.summary(tuple(SKIPPED)), walk.note(files, path)  # note: what was skipped, and any stop
    left = _also(_left_out(walk, path, options, images), _class_folders(path, files, walk) if images else "")
    if not files:
        yield ((f"no image files (by name, as a folder dataset lists them) under {path}" if images else
                f"no readable files under {path} match include={options['include']!r} exclude={options['exclude']!r}")
               + (f" ({walk.summary()} skipped)" if walk.summary() else "") + (f"; {left}" if left else "")
               + f": point {instance}.path at the dataset")
        return
    passed_over = _also(note, left)  # for the note or the reason: what the walk skipped or left out, any early stop
    listed = f" ({skipped} skipped)" if skipped else ""  # for the method column
    globs = f" (include={options['include']!r} exclude={options['exclude']!r})"
    where = path + (" (its image files)" if images else
                    globs if (options["include"], options["exclude"]) != ("*", "") else "")
    if options.get("format") == "tar":
        refused = _too_few_shards(files, where, instance, walk)
        yield _also(refused, passed_over) if refused else Source(
            files, f"{len(files)} tar shards (WebDataset) under {path}{listed}, each streamed whole, cold",
            passed_over, "dataset")
        return
    too_little = too_few(files, where, walk=walk)
    # Containers whatever their number: a scratch set of small files would not stand for them either.
    refused = not_one_sample_each(files, where, instance) if named else ""
    if not refused and not too_little:
        yield Source(files, f"{len(files)} files under {path}{filesystems(files)}{listed}, cold cache per file",
                     passed_over, "dataset")
        return
    if refused or options["decode"] == "image":
        yield _also(refused or f"{too_little}: point {instance}.path at the dataset (scratch bytes cannot be decoded as "
                    f"images)", passed_over)
        return
    parent, no_scratch = choose_parent(path, options["scratch_dir"], f"{instance}.scratch_dir")
    count, size = SCRATCH_SET
    no_room = no_scratch or room_for(parent, count * (size + 4096))  # type: ignore[arg-type]
    if no_room:
        yield _also(f"{too_little}: point {instance}.path at the dataset; no scratch set either: {no_room}", passed_over)
        return
    with scratch_dir(parent, protect=path) as directory:  # type: ignore[arg-type]
        scratch = write_small_files(directory, count, size)
        measured_on = subject.scratch_subject(directory, *subject.device_of(subject.bytes_home(files, path)))
        place = "" if measured_on == "scratch_on_dataset_fs" else f" in {parent}, not on the dataset's device"
        yield Source(scratch, f"{count} scratch files of {size // 1000} kB in ImageNet-style class folders, cold "
                     f"cache per file", _also(f"on an ImageNet-shaped scratch set{place}: {too_little}", passed_over),
                     measured_on)


def _as_a_folder_of_images(options: Mapping[str, Any]) -> bool:
    """Whether the files are listed as a folder dataset of images lists them, by extension (``IMAGE_EXTENSIONS``, any
    case): ``decode: image`` with ``include`` at "*", where the job decodes every sample as an image and a tag or
    caption file beside the images is none (ShivamShrirao/diffusers#134)."""
    return options["decode"] == "image" and options["include"].strip() == "*" and options.get("format") != "tar"


def _left_out(walk: Walk, path: str, options: Mapping[str, Any], images: bool) -> str:
    """What the listing did not take of the files the walk found, in numbers by extension and why; "" for none."""
    counted = left_out(walk)
    if not counted:
        return ""
    if images:
        return (f"left out under {path}: {counted} not images by name, as a folder dataset of images leaves them "
                f"out (torchvision's ImageFolder lists {', '.join(IMAGE_EXTENSIONS)}, in any case); a job that lists "
                f"every file decodes them too and fails: name them in include (\"*.jpg,*.txt\") to read them as it "
                f"does")
    return f"left out under {path}: {counted} by include={options['include']!r} exclude={options['exclude']!r}"


def _class_folders(path: str, files: Sequence[DataFile], walk: Walk) -> str:
    """What torchvision's ImageFolder, which takes each folder directly under ``path`` as a class, makes of ``files``
    (``listing``'s, by ``IMAGE_EXTENSIONS``): images in no class folder, which it does not list (none at all: it
    raises, pytorch/examples#412), and, when the walk looked at everything, class folders holding no image, on which it
    raises (layumi/University1652-Baseline#46); "" when it lists them all. Hidden folders are left to the walk's
    count of them."""
    try:
        folders = sorted(entry.name for entry in os.scandir(path) if entry.is_dir() and not entry.name.startswith("."))
    except OSError:
        return ""
    loose = sum(1 for found in files if os.sep not in os.path.relpath(found.name, path))
    said = []
    if loose and not folders:
        said.append(f"the {_count(loose, 'image')} lie directly under {path}, in no folder: torchvision's ImageFolder "
                    f"takes the folders under it as classes, finds none and raises FileNotFoundError (a flat folder "
                    f"dataset reads them)")
    elif loose:
        said.append(f"{_count(loose, 'image')} lie directly under {path}, in no class folder: torchvision's "
                    f"ImageFolder does not list them")
    holding = {os.path.relpath(found.name, path).split(os.sep)[0] for found in files}
    empty = [name for name in folders if name not in holding] if not walk.stopped else []
    if empty:
        named = ", ".join(empty[:EXAMPLES]) + (", ..." if len(empty) > EXAMPLES else "")
        said.append(f"{len(empty)} of the {len(folders)} folders under {path} hold no image ({named}): torchvision's "
                    f"ImageFolder raises FileNotFoundError on them (\"Found no valid file for the classes ...\") "
                    f"unless allow_empty=True")
    return "; ".join(said)


def _count(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _too_few_shards(files: list[DataFile], where: str, instance: str, walk: Walk | None = None) -> str:
    """Why the tar shards ``files`` cannot stand for the dataset, with the fix; "" when they can.

    Few shards are judged by the samples inside them (``shards.count_samples``, headers only), never
    by their count (issue 21, case 8). The configuration already points at shards: a fix never says so again.
    """
    too_little = too_few(files, where, walk=walk)
    if not too_little:
        return ""
    samples, damage = shards.count_samples([f.name for f in files], MIN_SAMPLES)
    if not samples:
        return (f"no sample in the {len(files)} files under {where}" + (f" (first: {damage})" if damage else "")
                + f": point {instance}.path at WebDataset tar shards, and include at their names (\"*.tar\")")
    too_little = too_few(files, where, samples=samples, walk=walk)
    return too_little and (f"{too_little}: so few samples are re-read from caches, not from the storage: if the "
                           f"dataset has more shards, widen {instance}.path or include to them all; if not, it fits in "
                           f"the page cache and needs no storage gate (required: false on this check)")


def _also(text: str, passed_over: str) -> str:
    """``text``, then what the walk skipped ("skipped under PATH: 1 unreadable directory") when it skipped any."""
    return "; ".join(part for part in (text, passed_over) if part)


@contextlib.contextmanager
def _job_dataset(options: Mapping[str, Any], instance: str) -> Iterator[Source]:
    """The job's own Dataset; what its code raises becomes one line naming it (``UserCodeRaised``)."""
    with usercode.on_path(options["python_path"]):
        try:
            job = user.build(options)
        except UserCodeError as error:
            raise usercode.UserCodeRaised(f"{instance}.{error.option}: {error}", error.option) from None
        kind = "iterable" if user.iterable(job.dataset) else f"{len(job.dataset)} samples"  # a sampler needs len()
        description = (f"{options['dataset']}(**dataset_args) ({type(job.dataset).__name__}, {kind}), collate_fn="
                       f"{options['collate_fn'] or 'default_collate'}")
        with _blamed(instance, "dataset"):
            made_cold = cold.verified(job.dataset, options.get("dataset_args") or {})
            yield Source(None, description, made_cold.note, "job_dataset", job, made_cold.warm, made_cold.method)


@contextlib.contextmanager
def _job_loader(options: Mapping[str, Any], instance: str) -> Iterator[Source]:
    """The job's own DataLoader (``job_loader``), its Dataset the samples; its code's errors named as the dataset's."""
    from preflight.loading import job_loader

    with usercode.on_path(options["python_path"]), _blamed(instance, "loader", waits="loader"):
        loader, job = job_loader.build(options)
        made_cold = cold.verified(loader.dataset, options.get("loader_args") or {})
        yield Source(None, job_loader.describe(options, loader), made_cold.note, "job_dataset",
                     job._replace(loader=loader), made_cold.warm, made_cold.method)


@contextlib.contextmanager
def _blamed(instance: str, option: str, ours: bool = False, waits: str = "loader_timeout") -> Iterator[None]:
    """Re-word what the job's code raises in the block as one line naming it (``UserCodeRaised``): a
    ``UserCodeError`` (its count_samples, a setting ``loader_for`` refuses, an object its start method cannot
    pickle) on its own option; an exception from the job's frames, or from a worker, on ``option``. Over
    preflight's ``ours`` datasets, a worker's exception is the job's only where its frames are the job's
    (worker_init_fn's), not preflight's reading a file. A batch later than the DataLoader's timeout is the
    error of ``waits``, the option that set it: the job's DataLoader raises the same."""
    try:
        yield
    except UserCodeError as error:
        raise usercode.UserCodeRaised(f"{instance}.{error.option}: {error}", error.option) from None
    except Exception as error:  # noqa: BLE001  only the job's own exceptions are re-worded
        if isinstance(error, RuntimeError) and str(error).startswith("DataLoader timed out after"):  # torch's own
            init = settings.init_overran()
            if init:  # the job's own setting stops it on any node: its code's, exit 2, never a stalled node
                raise usercode.UserCodeRaised(f"{instance}.worker_init_fn: {init}", "worker_init_fn") from None
            raise usercode.UserCodeRaised(f"{instance}.{waits}: {error}: no batch came from the workers within the "
                                          f"DataLoader's timeout, and the job's DataLoader raises the same: find "
                                          f"what stalls a worker (a hung mount, a slow __getitem__), or raise the "
                                          f"timeout", waits) from None
        theirs = usercode.blame_frames(error) or ("Original Traceback" in str(error) and (
            not ours or " (at " in usercode.blame(error)))
        if not theirs:
            raise  # preflight's or torch's own failure (a dead worker): as it is
        raise usercode.UserCodeRaised(f"{instance}.{option}: {usercode.blame(error)}: raised while the "
                                      f"DataLoader loaded batches", option) from None


def synthetic_shape(options: Mapping[str, Any]) -> tuple[int, ...]:
    """The synthetic samples' shape: the model's ``input_shape`` where the options have one (pipeline), else 3x224x224."""
    return tuple(options.get("input_shape") or SYNTHETIC_SHAPE)


def loader_for(options: Mapping[str, Any], source: Source, decode: str | None = None) -> Loader:
    """``torch.utils.data.DataLoader``s over ``source`` with the job's settings from ``options`` (``Loader.fresh``).

    ``decode`` overrides ``options["decode"]`` for the files (``"none"``: the raw-bytes loader).
    ``pin_memory`` is honoured only where a CUDA device is visible, as torch itself warns otherwise.
    The job's other settings (``settings``: start method, persistent workers, worker_init_fn, drop_last,
    the DataLoader's timeout, in_order, seed, shuffle, sampler) are passed as the job passes them; call it
    inside ``opened``, which puts ``python_path`` first and re-words what they refuse.

    Raises:
        UserCodeError: this torch lacks a setting given (``in_order``); ``worker_init_fn`` cannot be imported;
            under spawn or forkserver, the job's Dataset, collate_fn or worker_init_fn cannot be pickled.
    """
    import numpy.random  # noqa: F401
    import torch

    if source.job is not None and source.job.loader is not None:
        return _jobs_own(options, source)
    data = source.data if source.data is not None else Dataset.private()  # a Source made outside ``opened``
    # Each forked worker seeds numpy.random (torch's _worker_loop). Imported here, once, not lazily in every
    # child: a fork taken while another thread held an import lock fails that import with a KeyError
    # (importlib's _ModuleLock after fork), and the worker "exited unexpectedly with exit code 1".
    workers = auto_workers() if options["num_workers"] == "auto" else int(options["num_workers"])
    pin = bool(options["pin_memory"]) and torch.cuda.is_available()
    settings.refuse_unsupported(options)
    init, rng = settings.worker_init(options), settings.generator(options)
    drop_last = bool(options.get("drop_last", False))
    fs, bypass, tally, first_pass = None, None, None, None
    shuffle, collate, count = source.files is not None and options.get("shuffle", True), None, sizes_or_tensor
    description = source.description
    batch_size = int(options["batch_size"])
    job = source.job
    replays = None
    if job is not None:
        dataset: Any = job.dataset
        collate = job.collate
        description += f", {user.counted_by(job, options['count_samples'])}"
        if user.iterable(dataset) and workers > 1:
            replays = user.Replays(workers)
            description += ", a batch that repeats an earlier one counting no sample"
        if not user.iterable(dataset) and job.sampler is None:  # fresh pools continue one epoch, never restart it
            first_pass = PassSampler(data, len(dataset), shuffle=bool(options.get("shuffle", True)),
                                     seed=_seed(options))
    elif source.files is None:
        dataset = SyntheticImages(synthetic_shape(options))
    else:
        files = source.files
        # Where open() lands (a link's target), by its directory: that stays when a file vanishes.
        fs = filesystem_of(os.path.dirname(os.path.realpath(files[0].name)))
        names = [f.name for f in files]
        # The job reads through the page cache, so the loader does too, each file's cached pages dropped first
        # (fio's --invalidate=1): in a DataLoader worker, O_DIRECT read 1.5-1.7x the buffered reads of the same
        # cold files (docs/checks.md, "Cold, as the job reads"); storage keeps O_DIRECT, a device's figure.
        bypass = "none" if fs.memory_backed else "fadvise"
        if bypass == "fadvise":
            data.written_back(files[0].name)  # DONTNEED leaves dirty pages: a dataset just written stays cached
        if options.get("format") == "tar":  # an IterableDataset: each worker streams its own shards, in order
            dataset = shards.ShardSamples(files, bypass, decode or options["decode"], float(options["sample_delay"]),
                                          data)
            tally = shards.ShardTally()
            shuffle, collate, count = False, shards.collate_items, tally
        else:
            dataset = FileSamples(files, bypass, decode or options["decode"], float(options["sample_delay"]),
                                  data)
            collate = collate_sizes
            # One pass over the files for every DataLoader made here: fresh pools continue it, never restart it.
            first_pass = PassSampler(data, len(names), names, bool(shuffle), _seed(options))
        description += (" (buffered, as the job reads, each file's cached pages dropped first: posix_fadvise "
                        "DONTNEED)" if bypass == "fadvise" else f" ({bypass})")
    # Under spawn and forkserver each worker is sent these pickled: one that cannot be is the job's failure at its
    # first batch ("Can't pickle local object"), told here before a worker starts, naming the object.
    settings.refuse_unpicklable(options, workers, {"dataset": dataset if job is not None else None,
                                                   "collate_fn": collate if job is not None else None,
                                                   "worker_init_fn": init})
    extra = settings.keywords(options, workers, init, rng)

    def fresh() -> Counted:
        batching: dict[str, Any] = {"batch_size": batch_size, "shuffle": shuffle, "drop_last": drop_last}
        if first_pass is not None:
            batching = {"batch_size": batch_size, "sampler": first_pass, "drop_last": drop_last}
        counting = count
        if job is not None:  # counted as the job's DataLoader counts: one record per DataLoader (user.batching)
            batching, counting = user.batching(job, batch_size, replays, shuffle=bool(options.get("shuffle", True)),
                                               drop_last=drop_last, generator=rng, first_pass=first_pass)
        dataloader = torch.utils.data.DataLoader(
            dataset, **batching, num_workers=workers, pin_memory=pin,
            prefetch_factor=int(options["prefetch_factor"]) if workers else None, collate_fn=collate, **extra)
        return Counted(dataloader, counting)

    method = (f"DataLoader(batch_size={options['batch_size']}, num_workers={workers}, pin_memory={pin}, "
              f"prefetch_factor={options['prefetch_factor'] if workers else None}"
              f"{settings.describe(options, workers)}) over {description}"
              + (f"; {source.cold}" if source.cold else ""))
    return Loader(method, workers, fs, bypass, fresh, tally, replays, batch_size,
                  int(options["prefetch_factor"]) if workers else None, first_pass)


def _seed(options: Mapping[str, Any]) -> int:
    """The seed of the pass's one permutation: the job's ``seed``, or 0 for ``seed: auto``."""
    seed = options.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def _jobs_own(options: Mapping[str, Any], source: Source) -> Loader:
    """The job's own DataLoader object (``loader``), measured as it is: each fresh pool a new iterator of it."""
    from preflight.loading import job_loader

    job = source.job
    loader = job.loader  # type: ignore[union-attr]
    job_loader.refuse_unpicklable(options, loader)
    workers = loader.num_workers
    if workers and loader.timeout > 0 and loader.worker_init_fn is not None:  # told apart from a stall (``_blamed``)
        loader.worker_init_fn = settings.TimedInit(loader.worker_init_fn, loader.timeout)
    replays = user.Replays(workers) if user.iterable(loader.dataset) and workers > 1 else None
    count = job_loader.counting(loader, job, replays)  # type: ignore[arg-type]
    method = source.description + f", {user.counted_by(job, options.get('count_samples') or '')}"  # type: ignore[arg-type]
    if replays is not None:
        method += ", a batch that repeats an earlier one counting no sample"
    if source.cold:
        method += f"; {source.cold}"
    return Loader(method, workers, None, None, lambda: Counted(loader, count), None, replays, loader.batch_size,
                  loader.prefetch_factor if workers else None)


class SyntheticImages:
    """Map-style dataset of random float32 tensors of ``shape`` (default 3x224x224: ImageNet-sized, 588 KiB each)."""

    def __init__(self, shape: Sequence[int] = SYNTHETIC_SHAPE) -> None:
        self.shape = tuple(shape)

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> Any:
        import torch

        return torch.rand(self.shape)
