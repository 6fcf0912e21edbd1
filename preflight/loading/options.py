"""The options that say how the job's samples reach a batch: read by the dataloader and pipeline checks alike.

One table (as fio declares its options), which ``config`` validates and ``list`` shows; the dataloader check adds
its emulation and pool options after these, the pipeline check takes these with the model's.
"""

from __future__ import annotations

from typing import Any, Mapping

from preflight.checks.base import Option
from preflight.units import Dimension

# The options that only the files under path use: giving one with the job's dataset or synthetic samples,
# which read no file, is a config error rather than a setting silently ignored (config._refuse_ignored).
FILES_ONLY = ("dataset", "synthetic", "loader")
# The options that set what the job's own DataLoader (``loader``) already holds: given beside it, refused.
IN_THE_LOADER = ("loader",)
OPTIONS = (
    Option("loader", "code", "", "the job's own DataLoader: \"package.module:factory\", a callable returning the "
           "torch DataLoader the job trains from (called with loader_args), measured as that object: its Dataset, "
           "sampler, batch_size, workers, start method and every other setting; the options that set those here "
           "are refused beside it"),
    Option("loader_args", "mapping", {}, "keyword arguments passed to the loader factory ({root: /data})",
           for_factory=("loader",)),
    Option("dataset", "code", "", "the job's own Dataset: \"package.module:factory\", a callable returning a "
           "torch Dataset or IterableDataset (transforms included); empty: the files under path",
           ignored_with=IN_THE_LOADER),
    Option("dataset_args", "mapping", {}, "keyword arguments passed to the dataset factory ({root: /data, size: 224})",
           for_factory=("dataset",)),
    Option("collate_fn", "code", "", "the job's collate function, \"package.module:name\" (with dataset; "
           "default: torch's default_collate)", for_factory=("dataset",)),
    Option("count_samples", "code", "", "how the job counts a batch's samples, \"package.module:function\" (batch -> "
           "int), with dataset; default: the batch sampler's indices, or for an IterableDataset the batch's first "
           "tensor's first dimension (else its first list's length), never above batch_size",
           for_factory=("dataset", "loader")),
    Option("python_path", "paths", [], "directories put first on sys.path to import loader, dataset, "
           "collate_fn, count_samples, sampler and worker_init_fn (relative to this file), e.g. [src]",
           for_factory=("dataset", "worker_init_fn", "loader")),
    Option("path", "path", "", "dataset directory (empty: none named; the working directory is measured and no "
           "dataset threshold can pass); every matching regular file under it (links followed wherever "
           "they lead and mount points descended, as os.walk does; pseudo filesystems and hidden entries skipped "
           "and counted) is one sample, or with format: tar one shard", ignored_with=FILES_ONLY),
    Option("include", "text", "*", "comma-separated globs of files to read (\"*.jpg,*.png\", \"train/*\"); with "
           "decode: image, \"*\" reads the images as a folder dataset lists them (torchvision ImageFolder's "
           "extensions, in any case), the other files (tags, captions) left out and counted in the table",
           ignored_with=FILES_ONLY),
    Option("exclude", "text", "", "comma-separated globs of files to skip", ignored_with=FILES_ONLY),
    Option("format", "choice", "files", "`files`: each file is one sample; `tar`: the files are WebDataset tar shards "
           "(include: \"*.tar\"), samples grouped by key, each worker streaming its own shards",
           choices=("files", "tar"), ignored_with=FILES_ONLY),
    Option("decode", "choice", "none", "`image`: decode each file with Pillow (pip install pillow) "
           "and report the raw-bytes rate beside it", choices=("none", "image"), ignored_with=FILES_ONLY),
    Option("synthetic", "bool", False, "random 3x224x224 float32 samples instead of files (IPC/shm, not storage)",
           ignored_with=("dataset", "loader")),
    Option("batch_size", "int", 64, "samples per batch, as the job's DataLoader", minimum=1,
           ignored_with=IN_THE_LOADER),
    Option("num_workers", "int_or_auto", "auto", "worker processes; auto = 70% of the CPUs the cgroup allows",
           ignored_with=IN_THE_LOADER),
    Option("pin_memory", "bool", True, "pin batches in page-locked memory (ignored without a CUDA device)",
           ignored_with=IN_THE_LOADER),
    Option("prefetch_factor", "int", 2, "batches each worker loads ahead", minimum=1,
           ignored_with=IN_THE_LOADER),
    # The job's DataLoader settings beyond batching (``settings``): each is passed to the DataLoader as the job
    # passes it, so a setting that changes what the job does changes what is measured (issue 32, case 3).
    Option("multiprocessing_context", "choice", "default", "how workers start, as DataLoader("
           "multiprocessing_context=...): fork, spawn (jobs that touch CUDA in workers must), forkserver; default: "
           "this Python's (fork on Linux before 3.14). Under spawn and forkserver each worker receives a pickled copy "
           "of the Dataset, collate_fn and worker_init_fn, so one holding a lambda is the check's error, and each "
           "pool's start is paid as the job pays it", choices=("default", "fork", "spawn", "forkserver"),
           ignored_with=IN_THE_LOADER),
    Option("persistent_workers", "bool", False, "keep the workers from one epoch to the next, as DataLoader("
           "persistent_workers=True); false, torch's default: each epoch starts a fresh pool, as the job's does",
           ignored_with=IN_THE_LOADER),
    Option("worker_init_fn", "code", "", "the job's worker_init_fn, \"package.module:function\", called in each "
           "worker with its id before it loads (seeding numpy, opening a per-worker handle)", ignored_with=IN_THE_LOADER),
    Option("drop_last", "bool", False, "drop each epoch's last incomplete batch, as DataLoader(drop_last=True)",
           ignored_with=IN_THE_LOADER),
    Option("loader_timeout", Dimension.DURATION, "0s", "the DataLoader's timeout: how long it waits for one batch "
           "from the workers before it raises, 0 for ever (named apart from timeout, the whole check's limit); a "
           "batch slower than this is the check's error, as it is the job's", ignored_with=IN_THE_LOADER),
    Option("in_order", "bool", True, "false: batches as the workers finish them, DataLoader(in_order=False) "
           "(torch >= 2.6; an older torch is the check's error)", ignored_with=IN_THE_LOADER),
    Option("seed", "int_or_auto", "auto", "seed of the DataLoader's generator, which draws the shuffle order and the "
           "workers' seeds, as the job's generator=torch.Generator().manual_seed(seed); auto: unseeded, as torch "
           "draws without one", minimum=0, ignored_with=IN_THE_LOADER),
    Option("shuffle", "bool", True, "draw samples in a random order, as a training DataLoader(shuffle=True); false: "
           "in order (a tar shard or an IterableDataset streams in its own order)", ignored_with=("sampler", "loader")),
    Option("sampler", "code", "", "the job's sampler, \"package.module:factory\" called with the Dataset and "
           "returning a torch Sampler (WeightedRandomSampler, a DistributedSampler for one rank), with dataset; "
           "default: shuffle", for_factory=("dataset",)),
    Option("worker_sweep", "bool", False, "also measure the loader at 1, 2, 4, ... workers up to the CPUs the "
           "cgroup allows and num_workers, each a fresh pool for an equal share of the sweep's phase of duration "
           "(the sweep is one phase beside the loader's), and report recommended_num_workers: the fewest within "
           "5 % of the best samples/s", ignored_with=IN_THE_LOADER),
    Option("max_files", "int", 10000, "files under path to read, taken in turn from every folder (the walk "
           "stops there, and after 4x as many entries, and the figures say so), so walk time and memory stay "
           "bounded", minimum=1,
           ignored_with=FILES_ONLY),
    Option("scratch_dir", "text", "", "writable directory outside path for the scratch set used when path holds "
           "too few files (default: the nearest writable directory above path on its filesystem)",
           outside="path", ignored_with=FILES_ONLY),
    Option("sample_delay", Dimension.DURATION, "0s", "test hook: sleep this long per sample read, a deliberately "
           "throttled reader (to rehearse a failing gate); 0 in real use", ignored_with=FILES_ONLY),
)


def check_user_code(options: Mapping[str, Any]) -> None:
    """The protocol's hook: ``preflight validate`` builds the job's dataset once and pickles it where the start
    method sends workers a copy (``user.check_user_code``); with ``loader``, builds the job's DataLoader once and
    pickles what its workers would receive (``job_loader.check_user_code``)."""
    if options.get("loader"):
        from preflight.loading import job_loader

        job_loader.check_user_code(options)
        return
    from preflight.loading import user

    user.check_user_code(options)
