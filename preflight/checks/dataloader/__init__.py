"""PyTorch DataLoader throughput over the real dataset files, and what it means for the GPUs.

The loader is a real ``torch.utils.data.DataLoader`` built with the job's settings
(``batch_size``, ``num_workers``, ``pin_memory``, ``prefetch_factor``) over files sampled
under ``path`` (include/exclude globs), one file per sample, each read cold through one 1 MiB
buffer per worker whatever its size (``files``). Files that hold many samples are no samples:
half or more named as a container format (HDF5, Parquet, Arrow, LMDB, TFRecord, tar...), or a
median file above 64 MiB (``files.not_one_sample_each``), make the metrics unmeasurable, pointing
at ``dataset:`` (a samples/s of whole gigabyte files is not what the job reads).
``num_workers: auto`` sizes the pool from the CPUs the cgroup quota allows (``cpus``).
With ``decode: image`` each sample is also decoded (Pillow) and the raw-bytes rate is
measured beside it, so a decode-bound node is called decode-bound, not storage-bound.
With ``format: tar`` the files are WebDataset tar shards (``shards``): samples are the members
grouped by key, a key once per shard however its members lie (ungrouped shards are named in the
row's note), each worker streams its own shards whole, as webdataset does; a damaged shard
is read up to the damage and named in the row's note. Few shards are judged by the samples
inside them (``shards.count_samples``), never by their count.
With ``synthetic: true`` samples are random 3x224x224 tensors: IPC and collation only.
With ``dataset: "package.module:factory"`` the loader reads the job's own Dataset instead
(``user``: built in this worker with ``python_path`` on ``sys.path``, called with
``dataset_args``, the job's ``collate_fn`` if named); an exception the job's code raises is
the check's error, one line naming it and the job's frames (``usercode.blame``). It opens its files itself, so
before its pass the files it names are dropped from the page cache and checked gone (``cold``); where they stay
(tmpfs, pages another process maps) the figure is labelled warm and cache-bound. Its samples are
counted as the job's DataLoader counts them, whatever the collate makes of a batch (time-major
T x B, packed 1 x tokens, a dict of lists of strings): the indices its batch sampler put in the
batch; an IterableDataset has no sampler, so the batch's first dimension counts, and a count
above ``batch_size`` makes the figures unmeasurable; ``count_samples`` names the job's own count.
The job's other DataLoader settings are passed as the job passes them (``settings``): its start method
(``multiprocessing_context``: under spawn and forkserver each worker receives a pickled copy of the Dataset,
collate_fn and worker_init_fn, so one that holds a lambda or a local function is the check's error, naming
the object and where the job defined it, and ``validate`` says so at the option's line), ``persistent_workers``,
``worker_init_fn``, ``drop_last``, ``loader_timeout`` (the DataLoader's ``timeout``), ``in_order``, ``seed``
(its generator), ``shuffle`` and ``sampler``.
A path holding too few files to stand for a dataset (``dataset_walk.too_few``: a few stray
files in a working directory) is never judged as one: the loader reads an ImageNet-shaped
scratch set written beside it, and the row says so (``Measurement.note``). A path where no
file matches at all is unmeasurable (a wrong path or glob must fail, not pass on scratch).
Whatever a row shows, its note (or the reason it has no figure) says what the walk skipped
under ``path`` and why ("skipped under PATH: 1 unreadable directory"), the scratch set's too.

Method: the run reads the data as the job's first epoch does (``io.dataset``, docs/checks.md "How a
run reads the data"): one pass, each sample once. ``worker_pools`` fresh worker pools are measured in
turn, continuing that pass (one permutation and its cursor, not a new shuffle each), each in an equal
share of the duration that pays for its start and warm-up too; in each, warm-up batches are discarded,
then samples/s over repeated time windows (as MLPerf Storage/DLIO report samples/s after the
first steps). The loader is never restarted: the pass's end stops the windows; an IterableDataset or
tar shards are one stream read by one pool. A file that fails to read (EIO) or decode is counted in
``unreadable_samples`` and named, and the pass goes on. The figure is the pools' samples over their windows' time
(``loop.time_weighted``; a window ends on a whole round of the workers' batches) and ``samples`` holds each pool's
rate; a later pool the pass ends in before its second window holds the pass's tail and is not counted. A pool's
rate can depend on where its workers started, as a job's does each epoch; where pools cost
more than their share, fewer are measured, as the method and a warning say. With
``step_time``, a second phase emulates the GPU (``loop``) and reports accelerator
utilization as MLPerf Storage defines it; it, and the raw reads of ``decode: image``, take
an equal share of the duration. With ``samples_per_gpu``, the throughput is also
reported as a share of the required rate (``required``), with the arithmetic shown.
Before any worker starts, one batch of the job's is loaded as num_workers 0 loads it and its shared-memory bytes
projected to the batches the job holds in flight, against /dev/shm's free space (``shared_memory``): where they
would not fit, no pool is started (its workers would die with a bus error, as the job's would) and the row says
the ``--shm-size`` or ``sizeLimit`` to set and the batch_size that would fit.
"""

from __future__ import annotations

# The tables only: `measuring` is imported when the check runs, for a short start-up (bench/cli_startup.py).

from typing import Any, Mapping

from preflight.checks.base import Budget, Metric, Option, Timing
from preflight.checks.dataset_path import MOUNTED_HINT
from preflight.loading import options as loading_options
from preflight.measurement import Measurement
from preflight.units import Dimension

NAME = "dataloader"
DURATION = ("the whole measuring, split equally between its phases (raw reads with decode: image, the loader, the "
            "emulated GPU with step_time); in each, worker_pools fresh pools share it, each pool's start and warm-up "
            "included; with a throughput threshold its pools' interval straddles, further pools up to max_duration; "
            "without one, pools that do not fit are left out, as the method and a warning say")
# A run's cost whatever its duration (bench/check_wall_time.py): importing torch (~2 s), the walk, a scratch set.
STARTUP_S = 2.5
HELP = ("samples/s of a real torch DataLoader over the dataset files or the job's own Dataset, accelerator "
        "utilization, required rate")
OPTIONS = (
    *loading_options.OPTIONS,
    Option("scan", "choice", "sample", "`sample` (the default): the check reads its share of the dataset, and the rows that count faults say how much they read; `all`: after measuring, it reads every file under path the walk finds (max_files does not cap it) once, with the job's loader settings (its workers, batch size, decode), counting and naming every file that cannot be read or decoded, with progress on stderr, for as long as the instance's timeout allows: the nightly data-integrity run beside the per-job gate",
           choices=("sample", "all"), ignored_with=("dataset", "synthetic", "loader", "format", "worker_sweep")),
    Option("worker_pools", "int", 8, "fresh worker pools measured in turn, each in an equal share of duration that "
           "pays for its start and warm-up too (with a threshold the pools' interval straddles, further pools up to "
           "max_duration; else pools that do not fit are left out, as the method and a warning say); the figures are their sustained rates weighed by their measured time (a pool's rate: the lower of "
           "its samples over its time and the least-squares slope of its count against time, which a throttle's "
           "start-up burst does not lift; a pool's rate can hang on where its workers started, as an epoch's does)",
           minimum=1),
    Option("step_time", Dimension.DURATION, "0s", "emulated GPU compute per batch (DLIO computation_time); "
           "> 0 measures accelerator_utilization"),
    Option("samples_per_gpu", Dimension.SAMPLE_RATE, "0 samples/s", "what one GPU consumes; > 0 reports "
           "throughput_vs_required; `measured`: the `model` instance's samples_per_s from this run (fastest "
           "GPU), or `{from: <model instance>}`", measured_by=("model", "samples_per_s")),
    Option("gpus", "int_or_auto", "auto", "GPUs to feed; auto = the visible CUDA devices", minimum=1),
    Option("headroom", Dimension.PERCENT, "0 %", "margin on the required rate (20 % asks for 1.2x)"),
)
METRICS = (
    Metric("throughput", "samples/s", True, "samples delivered per second after warm-up (mean of the worker "
           "pools' rates); "
           "decoded when decode: image", hint="the row's fix follows what the run measured: "
           "decode-bound (decode: image, raw_throughput 1.5x throughput or more): add workers or decode on the GPU "
           "(NVIDIA DALI); storage-bound (raw reads slow too, or files read undecoded): raise num_workers if CPUs "
           "are idle, else a faster volume, a local NVMe cache or shards (WebDataset, LMDB); tar shards already: "
           "at least as many shards as workers, a faster volume or a local cache; the job's Dataset (dataset:): "
           "profile its __getitem__, whose decode and transforms set the pace", about_data=True, by_user=True),
    Metric("bandwidth", "MB/s", True, "bytes delivered per second, 1 MB = 10^6 B: of the sample files read, or "
           "with dataset: of the batches' tensors (nbytes) delivered to the training loop", about_data=True, by_user=True),
    Metric("raw_throughput", "samples/s", True, "samples/s reading the same files without decoding "
           "(decode: image only): what storage alone delivers", about_data=True, by_user=True),
    Metric("accelerator_utilization", "%", True, "emulated compute time / wall time with step_time per batch, "
           "first steps excluded (MLPerf Storage AU; DLIO); MLPerf requires >= 90% (70% CosmoFlow)", about_data=True, by_user=True),
    Metric("throughput_vs_required", "%", True, "throughput as a share of samples_per_gpu x gpus x "
           "(1 + headroom); `{min: 100 %}` means the node can feed its GPUs", about_data=True, by_user=True),
    Metric("mounted", "", True, "1 when path exists and lies on a filesystem mounted for it, not on the root "
           "filesystem (the node's, or a container's overlay), else 0 (/proc/self/mountinfo); `{min: 1}` makes a "
           "dataset mount that did not come up the node's failure (exit 1), where a missing path is otherwise the "
           "config's mistake (exit 2)", flag=True, hint=MOUNTED_HINT),
    Metric("unreadable_samples", "", False, "sample files of the pass whose read failed with an I/O error (EIO: a "
           "bad sector, an object lost behind a FUSE client) or whose image Pillow could not decode (truncated, "
           "zero-filled); each one stops the job's DataLoader worker with its exception; the first named in the "
           "row; with those other checks of the run met under path added, over the files the run read (the note says "
           "how many), or every file with scan: all", hint="remove or re-fetch the files named, or make the job's Dataset skip what it cannot read",
           about_data=True, by_user=True, counts_faults=True),
    Metric("memory_peak", "B", False, "host memory the loader held: the largest sum of PSS (shared pages counted "
           "once) of the main process and every worker, read from /proc/PID/smaps_rollup after each window (as "
           "PyTorch's dataloader benchmark script does), plus the files on tmpfs they wrote and left unmapped "
           "(the cgroup's memory.stat shmem: the limit counts them)"),
    Metric("memory_headroom", "%", True, "share of the memory the job may use (the tighter of the cgroup's "
           "memory.max / memory.limit_in_bytes / v1 hierarchical_memory_limit, v2 memory.high where lower, and "
           "MemAvailable) left free by the "
           "loader's memory projected to one epoch of len(dataset) samples: the peak plus the workers' copy-on-write "
           "copies to come (pytorch/pytorch#13246), fitted on the windows as they slow (each worker copies a page "
           "once), at most every worker copying what building the dataset took, plus its tmpfs files per sample; "
           "< 0 means an OOM kill",
           hint="the loader's memory, projected to one epoch, leaves {measured} of the limit: lower num_workers or "
           "prefetch_factor, or raise the pod's memory limit", about_data=True),
    Metric("pids_available", "", True, "tasks (processes and threads) the job's loader may hold, read before it "
           "starts: the tightest of the cgroup's pids.max less pids.current up the tree (v1 and v2), RLIMIT_NPROC "
           "less the user's tasks (not for root), kernel.threads-max and pid_max less the tasks scheduled; the "
           "gate's runner process not counted, the tightest limit named in the method (cgroup pids.rst, getrlimit(2))", by_user=True),
    Metric("pids_headroom", "%", True, "share of pids_available left at the loader's peak tasks: the main "
           "process's threads (a queue feeder per worker, pin-memory, intra-op) and each worker's, from "
           "/proc/PID/task after each window; `{min: 0 %}` means the job's loader fits; a loader refused a thread "
           "or worker fails it with \"pids limit N reached (FILE)\"",
           hint="the loader's tasks leave {measured} of the pids limit: raise pids.max (Docker --pids-limit, "
           "Kubernetes podPidsLimit) or lower num_workers", by_user=True),
    Metric("shm_needed", "B", False, "shared memory (/dev/shm) the job's loader holds at its peak: one batch loaded "
           "as num_workers 0 loads it (in a child process) before any worker starts (its tensors' storage bytes, as "
           "torch's workers send them through shared memory) x the batches in flight, prefetch_factor x num_workers "
           "(torch's _MultiProcessingDataLoaderIter) + 2 the training loop holds without pin_memory (its batch and "
           "the one before it), + the tensors the Dataset keeps whose views its batches are, once per worker (under "
           "spawn or forkserver all the Dataset's tensors, once: pickling it to the workers moves them there), + the "
           "loader's semaphores ((3 x num_workers + 8) pages); within 0-25% above a real loop's peak "
           "(bench/shm_needed.py); the job's "
           "num_workers and prefetch_factor, whatever the run's pools use; not with the files under path (their "
           "batches are counts, not data)"),
    Metric("shm_headroom", "%", True, "share of /dev/shm's free space (statvfs f_bavail) left at shm_needed; "
           "`{min: 0 %}` means the job's batches in flight fit; below, its workers die with a bus error or \"unable "
           "to write to file </torch_...>\" (pytorch/pytorch#5040, #2244), and preflight starts no worker pool",
           hint="the job's batches in flight leave {measured} of /dev/shm's free space: raise the container's "
           "/dev/shm (docker run --shm-size, a Kubernetes emptyDir with medium: Memory and a sizeLimit) or lower "
           "batch_size, num_workers or prefetch_factor"),
    Metric("workers", "", None, "worker processes the loader ran with: num_workers, or for auto 70 % of the CPUs "
           "the cgroup allows (cpu.max / cfs_quota, and the affinity mask)"),
    Metric("recommended_num_workers", "", None, "with worker_sweep: the fewest workers whose samples/s is within "
           "5 % of the best at 1, 2, 4, ... workers up to the CPUs allowed and num_workers (windows that overlap "
           "the best's are not told apart; the curve is in the message), and whose epoch fits the memory limit"),
)



def check_user_code(options: Mapping[str, Any]) -> None:
    """The protocol's hook: ``preflight validate`` builds the job's loader or dataset once (``loading.options``)."""
    loading_options.check_user_code(options)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure the loader built from ``options``; metrics that do not apply are left out."""
    from preflight.checks.dataloader import measuring

    return measuring.measure(options, budget, METRICS)


def phases(options: Mapping[str, Any]) -> int:
    """The measuring phases that share ``duration``: raw reads (``decode: image``), the loader, the emulated
    GPU (``step_time``) and the worker sweep (``worker_sweep``)."""
    return len(phase_names(options))


def phase_names(options: Mapping[str, Any]) -> list[str]:
    """The phases ``phases`` counts, as a reader knows them (named in the advice to raise ``duration``)."""
    return [name for name, on in (("raw reads", options.get("decode") == "image"), ("the loader", True),
                                  ("step_time", float(options.get("step_time") or 0) > 0),
                                  ("worker_sweep", bool(options.get("worker_sweep")))) if on]


def timing(options: Mapping[str, Any], budget: Budget) -> Timing:
    """``duration`` of measuring (at least 0.5 s a phase: one pool's warm-up and windows) after ``STARTUP_S``."""
    return Timing(max(budget.duration_s, 0.5 * phases(options)), STARTUP_S)
