"""Storage I/O on the dataset path, measured as fio measures it, from the device and not the cache.

The walk of ``path`` (``data``) finds the files a job would read, where its ``open()`` lands
(links followed and mount points descended, as ``os.walk`` does; taken in turn from every
folder, within ``max_files`` and a quarter of the check's timeout, and every figure on it says
when it stopped early), and reports what a job would trip over (unreadable files, links to
nowhere, files vanishing, hidden files it may read). Filesystem facts follow
(``facts``: free bytes and free inodes among them) for the filesystem that holds most of the dataset's bytes, which is not always
``path``'s own (a symlink farm keeps its links on one disk and its files on another): the
type, device and mount options are named in every result, because tmpfs, overlay, FUSE and
NFS each change what a number means; they never depend on a read or write succeeding. Then the
timed parts, each with a warm-up window and repeated windows (median compared, spread
reported; ``sampling.sample``) in an equal share of ``duration``: sequential and random reads
(``reads``), open+read+close of many small files (``small_files``), and, only where the
configuration judges ``seq_write`` or ``fsync_p99``, checkpoint writes with fsync (``writes``).

Page-cache honesty: reads use O_DIRECT with aligned buffers, else drop the file's pages
with posix_fadvise before reading (``io.uncached``); on a memory-backed filesystem, or when
a rate reaches page-cache speed or exceeds the network link (``guard``), the value is
marked cache-bound and ``verdict`` will not let it pass silently. ``path`` is never written:
scratch data goes to ``scratch_dir`` on the same filesystem and is removed afterwards, and a
figure measured on scratch data says so in its row (``Measurement.note``), with its subject:
scratch stands for the dataset only when verified on the device and mount source that hold
the dataset's bytes; elsewhere (a read-only dataset volume, scratch_dir on the local disk) it
is measured, named with its own filesystem, and cannot pass a dataset threshold. Each group of
metrics fails on its own: an error while reading (a full volume, a vanished file, a low
open-file limit) makes that group unmeasurable with the reason, never the whole check.
"""

from __future__ import annotations

# The tables only: `measuring` is imported when the check runs, for a short start-up (bench/cli_startup.py).

from typing import Any, Mapping

from preflight.checks.base import Budget, Metric, Option, Timing
from preflight.checks.dataset_path import MOUNTED_HINT
from preflight.measurement import Measurement
from preflight.units import Dimension

NAME = "storage"
DURATION = ("split equally between the timed parts that run, each with its warm-up: seq_read, rand_read (and its "
            "percentiles), small_files, and seq_write and fsync_p99 only when judged (they write scratch data); "
            "each part at least 1 s (a warm-up and 3 windows of 0.25 s), seq_write at least 4 writes of write_size")
# A run's cost whatever its duration (bench/check_wall_time.py): worker, walk, seq_read's 256 MiB scratch file.
STARTUP_S = 1.5
HELP = "filesystem facts, sequential/random reads, small files, writes and fsync on the dataset path, uncached"
OPTIONS = (
    Option("path", "path", "", "dataset directory (or file) to measure; opened read-only, never written (empty: "
           "none named; the working directory is measured and no dataset threshold can pass)"),
    Option("scratch_dir", "text", "", "writable directory for scratch data on the filesystem and device that hold "
           "path's data (elsewhere its figures cannot pass), outside path (default: the nearest writable directory "
           "above path on its filesystem); removed afterwards",
           outside="path"),
    Option("block_size", Dimension.SIZE, "1 MiB", "seq_read request size, as fio --bs (multiple of 4 KiB)",
           minimum=4096),
    Option("readers", "int", 4, "seq_read parallel readers, as fio --numjobs (one reader rarely saturates NVMe)",
           minimum=1),
    Option("data_size", Dimension.SIZE, "256 MiB", "bytes read by seq_read/rand_read; existing files first, "
           "else a scratch file", minimum=16 << 20),
    Option("rand_block", Dimension.SIZE, "4 KiB", "rand_read request size, as fio --bs (multiple of 4 KiB)",
           minimum=4096),
    Option("rand_depth", "int", 32, "rand_read requests in flight, as fio --iodepth", minimum=1),
    Option("io_processes", "int_or_auto", "auto", "processes sharing rand_depth, file_readers, and readers when "
           "seq_read reads small files whole (auto: up to 4; threads of one Python process cannot keep small reads "
           "in flight)", minimum=1),
    Option("small_file_size", Dimension.SIZE, "128 KiB", "files up to this size count as small (ImageNet: ~110 kB)"),
    Option("small_file_count", "int", 1000, "small files to read; written in scratch when path has fewer than 100",
           minimum=10),
    Option("file_readers", "int", 8, "small_files parallel readers, like DataLoader workers", minimum=1),
    Option("write_size", Dimension.SIZE, "128 MiB", "bytes per seq_write sample, written then fsynced",
           minimum=1 << 20),
    Option("max_files", "int", 10000, "data files under path to look at, taken in turn from every folder (the "
           "walk stops there, and after 4x as many entries, and every figure on it says so), so walk time and "
           "memory stay bounded", minimum=1),
    Option("scan", "choice", "sample", "`sample` (the default): the check reads its share of the dataset, and the rows that count faults say how much they read; `all`: after measuring, it reads every file under path the walk finds (max_files does not cap it) once, with file_readers readers, counting and naming every file that cannot be read, with progress on stderr, for as long as the instance's timeout allows: the nightly data-integrity run beside the per-job gate",
           choices=("sample", "all")),
)

METRICS = (
    Metric("filesystem", "text", None, "type, mount point, device and options of the filesystem holding path's "
           "data, where the job's open() lands through links (the one with most bytes; others in the row's note) "
           "(/proc/self/mountinfo, proc(5))"),
    Metric("free_space", "GiB", True, "space available to the job on path's filesystem (statvfs f_bavail)",
           hint="free space on {path}: delete old data or grow the volume", about_data=True),
    Metric("free_inodes", "", True, "inodes available to the job on path's filesystem, one per new file or folder "
           "(statvfs f_favail): with none left every create fails with ENOSPC though bytes are free; skipped where "
           "the filesystem reports 0 inodes in all (btrfs, many network and FUSE filesystems allocate them as needed)",
           hint="{path}'s filesystem is short of inodes, and each new file (a checkpoint, a cache entry) takes one: "
                "delete small files there (caches, old checkpoint shards, extracted samples) or recreate the volume "
                "with more inodes (mkfs.ext4 -N, or a smaller -i bytes-per-inode)", about_data=True),
    Metric("read_only", "", True, "1 when path's mount is read-only, else 0; `{min: 1}` requires it "
           "(mount options in /proc/self/mountinfo)", about_data=True, flag=True),
    Metric("mounted", "", True, "1 when path exists and lies on a filesystem mounted for it, not on the root "
           "filesystem (the node's, or a container's overlay), else 0 (/proc/self/mountinfo); `{min: 1}` makes a "
           "dataset mount that did not come up the node's failure (exit 1), where a missing path is otherwise the "
           "config's mistake (exit 2)", flag=True, hint=MOUNTED_HINT),
    Metric("open_files_limit", "", True, "soft RLIMIT_NOFILE of this process (getrlimit(2))"),
    Metric("unreadable_files", "", False, "files and directories under path the job's user cannot read (access(2) "
           "R_OK, or listing refused: the job would stop on PermissionError), and files whose read failed with an "
           "I/O error, those the run's other checks met under path added, over the files the run read (the note "
           "says how many), or every file with scan: all; `{max: 0}` gates on it",
           hint="make {path} readable by the job's user (chmod/chown, fsGroup in the pod's securityContext)",
           about_data=True, by_user=True, counts_faults=True),
    Metric("skipped_files", "", False, "entries under path that are not samples: unreadable, vanished while "
           "walked, special files, dangling links, directory loops, pseudo filesystems below path (proc, sysfs: not "
           "descended), empty files, hard or symbolic links to a file already counted, hidden entries the job's "
           "os.walk may read (.ipynb_checkpoints, ._x.jpg) (find -L -type f -size +0 -readable); the row says "
           "which, and whether the walk stopped before the end",
           hint="the row's note says what was skipped under {path}: fix permissions, remove dangling links and "
                "special files, delete hidden files the job would read (.ipynb_checkpoints, macOS ._* files; or "
                "skip them in the job's Dataset), or stop the process rewriting the dataset", about_data=True, by_user=True),
    Metric("seq_read", "MB/s", True, "sequential read throughput, 1 MB = 10^6 B; `readers` threads of "
           "`block_size` O_DIRECT reads over contiguous spans (fio --rw=read --direct=1 --bs=1M --numjobs) of "
           "path's files of 8 MiB or more (data extents only); else a scratch file beside path, or path's files read "
           "whole, as the row says",
           hint="{path} reads at {measured}: use a faster volume class or a local NVMe cache", about_data=True, by_user=True),
    Metric("rand_read", "IOPS", True, "random read operations per second of `rand_block` at `rand_depth` "
           "in flight (fio --rw=randread --direct=1 --bs=4k --iodepth), over seq_read's bytes",
           hint="{path} serves {measured}: random access (shuffled small samples) needs a low-latency volume", about_data=True, by_user=True),
    Metric("rand_read_p50", "ms", False, "median latency of one rand_read request (fio clat 50th percentile)", about_data=True, by_user=True),
    Metric("rand_read_p99", "ms", False, "99th-percentile latency of one rand_read request (fio clat 99th "
           "percentile): the tail a shuffled DataLoader waits on", about_data=True, by_user=True),
    Metric("small_files", "files/s", True, "open+read+close of whole small files per second, cold cache, "
           "`file_readers` in parallel (DLIO/MLPerf Storage file-per-sample pattern)",
           hint="pack small files into shards (WebDataset tar, LMDB, TFRecord) or cache them on local NVMe", about_data=True, by_user=True),
    Metric("small_files_bandwidth", "MB/s", True, "bytes of those small files per second, 1 MB = 10^6 B", about_data=True, by_user=True),
    Metric("seq_write", "MB/s", True, "checkpoint write throughput including the final fsync, in scratch_dir "
           "(fio --rw=write --bs=1M --end_fsync=1)", hint="checkpoints to {path} write at {measured}: "
           "use a faster volume or write checkpoints asynchronously", about_data=True),
    Metric("fsync_p99", "ms", False, "99th-percentile latency of fsync after a 4 KiB append, in scratch_dir "
           "(fio --rw=write --bs=4k --fsync=1, sync percentiles)", about_data=True),
)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure every metric on ``options["path"]``; unmeasurable ones say why in one line."""
    from preflight.checks.storage import measuring

    return measuring.measure(options, budget, METRICS)


def timing(options: Mapping[str, Any], budget: Budget) -> Timing:
    """``duration`` (at least 1 s per timed part that runs) of measuring after ``STARTUP_S``."""
    from preflight.checks.storage.parts import part_s, timed_parts

    return Timing(part_s(budget) * len(timed_parts(budget)), STARTUP_S)
