"""The storage check on an ImageNet-shaped folder against fio over the same files, paired rounds.

Usage: python3 bench/storage_vs_fio_imagenet.py [--dir DIR] [--classes 10] [--per-class 100]
                                                [--seconds 2] [--rounds 9]

Builds ``tests.datasets.imagenet`` (class folders of 110-113 kB files) in a temporary
directory under --dir, points the storage check at it with its defaults, and compares
each metric as the check measures it on such a folder with the fio job that does the same
I/O on the same inodes, in paired rounds (``fio_reference``); target: every median ratio
within 15%. Nine rounds by default: on this shared 2-CPU VM single pairs ranged from 0.5 to
2.7, and three runs of 7 rounds gave seq_read medians of 0.88, 1.01 and 1.15.

  small_files, small_files_bandwidth: the check's 8 loops (4 processes x 2 threads) each
      open, read whole with one O_DIRECT request and close files i, i+8, i+16 ... of the
      folder, round and round. fio: 8 jobs, job i over the same files in the same order
      (hard links in a folder of its own), --rw=read --direct=1 --bs=104k --openfiles=1
      --file_service_type=sequential --ioengine=psync --invalidate=0 --fadvise_hint=0.
  seq_read, rand_read on a scratch file: no file here is 8 MiB or more, so the check writes
      data_size (256 MiB) beside the folder and reads that instead (its row says so). fio
      reads the same file, with bench/storage_vs_fio.py's jobs (rand_read: libaio, 4 jobs x 8
      deep), and rand_read again with 32 psync jobs, preflight's own synchronous method.
  seq_read, rand_read over the small files read whole: what the check does when there is
      no room for scratch. seq_read's 4 readers (processes) take contiguous quarters of the
      files and read each whole with one 1 MiB request; fio: 4 jobs over the same quarters,
      as small_files' jobs. rand_read reads random 4 KiB blocks of the first 128 files, 32 in
      flight; fio: the same two rand_read jobs over those 128 files, --file_service_type=random.

fio reads nothing of a file shorter than its block size (--bs=1M over these files reads 0
bytes) and cannot read a file's last, partial 4 KiB block with O_DIRECT: its whole-file jobs
read 104 KiB of each file (the largest 4 KiB multiple every file holds), where preflight
reads every byte. Files/s compare like for like; MB/s carry up to 5% in preflight's favour
(all of it where a request's cost is per file, none where it is per byte).

Each metric is one pair of runs, preflight's and fio's back to back, so that both see the
same load; the check's own ``io.reads`` runs once first in each case, and its note on the
bytes it read is printed. The page cache is warmed (a buffered read of the same files)
before every run, so a figure that ignored O_DIRECT would stand out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any, Callable, Mapping, NamedTuple, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import defaults, per_storage_part, scratch_root  # noqa: E402
from bench.fio_reference import (Pair, fio, files_per_second, latency_ms, median_ratio, paired_rounds,  # noqa: E402
                                 print_table, rand_read_args, rand_read_sync_args, seq_read_args, verdict, warm)
from preflight.checks.storage import reads  # noqa: E402
from preflight.checks.storage.data import Found, Segment, segments, survey  # noqa: E402
from preflight.checks.storage.measure_io import IO, MAX_RANDOM_FILES  # noqa: E402
from preflight.io.dataset_walk import DataFile  # noqa: E402
from preflight.host.fsinfo import Filesystem, filesystem_of  # noqa: E402
from preflight.io.uncached import ALIGNMENT, bypass_for  # noqa: E402
from preflight.io.scratch import choose_parent, scratch_dir  # noqa: E402
from tests.datasets import imagenet  # noqa: E402

FILENAME_MAX = 4096  # fio refuses a longer option value ("value exceeds max length of 4096")
SYNC = "fio psync x32"  # the label of rows whose fio side is 32 synchronous jobs, preflight's own method
COMPARED = {  # label -> unit, in the table's order
    "small_files": "files/s",
    "small_files_bandwidth": "MB/s",
    "seq_read, scratch file": "MB/s",
    "rand_read, scratch file": "IOPS",
    f"rand_read, scratch file, {SYNC}": "IOPS",
    "seq_read, small files read whole": "MB/s",
    "rand_read, small files read whole": "IOPS",
    f"rand_read, small files read whole, {SYNC}": "IOPS",
}
LATENCIES = tuple(f"rand_read_{q}, {where}, {SYNC}" for where in ("scratch file", "small files read whole")
                  for q in ("p50", "p99"))


class Setting:
    """The storage check's defaults on one folder, and what the bench needs beside them."""

    def __init__(self, folder: str, seconds: float, links: str) -> None:
        self.options = defaults("storage", path=folder)
        self.seconds, self.links = seconds, links
        self.notes: dict[str, str] = {}  # what the check's rows say about the bytes they read
        self.budget, self.fs = per_storage_part(seconds), filesystem_of(folder)
        self.found = survey(folder, int(self.options["data_size"]), int(self.options["small_file_size"]),
                            int(self.options["max_files"]))
        # fio reads nothing of a file shorter than --bs: the largest 4 KiB multiple every file holds
        self.block = min(f.size for f in self.found.files) // ALIGNMENT * ALIGNMENT

    def io(self, scratch: str | None) -> IO:
        why_not = "" if scratch else "the bench gave it no scratch directory"
        return IO(self.options, self.budget, self.fs, scratch, why_not)

    def number(self, option: str) -> int:
        return int(self.options[option])


def linked(files: Sequence[str], folder: str) -> list[str]:
    """Hard links to ``files`` in ``folder``, named 00000, 00001 ... in order: the same inodes,
    under names short enough for one fio ``--filename`` list. Returns fio's job options."""
    os.makedirs(folder)
    names = [f"{index:05d}" for index in range(len(files))]
    for name, target in zip(names, files):
        os.link(target, os.path.join(folder, name))
    listed = ":".join(names)
    if len(listed) > FILENAME_MAX:
        raise SystemExit(f"bench: {len(files)} files for one fio job are too many for --filename: lower --per-class")
    return [f"--directory={folder}", f"--filename={listed}"]


def whole_files_jobs(shares: Sequence[Sequence[str]], links: str, block: int) -> list[str]:
    """fio options for one job per share, each reading its files in order, one ``block`` request each.

    ``--invalidate=0 --fadvise_hint=0``: by default fio calls posix_fadvise twice at every open
    (DONTNEED, then SEQUENTIAL; seen with strace), five system calls a file where preflight
    makes three (open, one read, close)."""
    args = ["--rw=read", "--direct=1", f"--bs={block}", "--ioengine=psync", "--openfiles=1",
            "--file_service_type=sequential", "--invalidate=0", "--fadvise_hint=0"]
    for index, share in enumerate(shares):
        args += [f"--name=job{index}", *linked(share, os.path.join(links, f"job{index}"))]
    return args


def small_files(at: Setting) -> Pair:
    """small_files and small_files_bandwidth, as the check reads the folder's own files."""
    files = [f.name for f in at.found.small[: at.number("small_file_count")]]
    loops = at.number("file_readers")  # the check's loops (processes x threads) with the default options
    job = whole_files_jobs([files[i::loops] for i in range(loops)], os.path.join(at.links, "small"), at.block)
    io = at.io(None)  # the folder holds enough small files: no scratch is written for this metric

    def ours() -> dict[str, float]:
        warm(files)
        rate, bandwidth = io.small(at.found)
        return {"small_files": rate.value, "small_files_bandwidth": bandwidth.value}

    def theirs() -> dict[str, float]:
        warm(files)
        measured = fio(at.seconds, *job)
        return {"small_files": files_per_second(measured), "small_files_bandwidth": measured["read"]["bw_bytes"] / 1e6}

    return Pair(ours, theirs)


class Reads(NamedTuple):
    """The bytes seq_read and rand_read read, as the check chose them, and fio's options for the same bytes."""

    label: str  # "scratch file", "small files read whole"
    io: IO
    parts: list[Segment]
    seq_job: list[str]  # fio options: seq_read's job(s)
    rand_files: list[str]  # fio options naming rand_read's files, given after the job's shape


def on_scratch(at: Setting, scratch: str) -> Reads:
    """With room for scratch: the file the check wrote (``io.reads`` once, here) and read."""
    io = at.io(scratch)
    at.notes["with room for scratch"] = io.reads(at.found)[0].note
    written = [entry for entry in os.scandir(scratch) if entry.is_file()]
    assert len(written) == 1, f"expected the check's one scratch file in {scratch}, found {written}"
    name, size = written[0].path, written[0].stat().st_size
    return Reads("scratch file", io, segments([DataFile(name, size)], at.number("data_size")),
                 [f"--filename={name}", *seq_read_args(size, at.number("readers"))], [f"--filename={name}"])


def read_whole(at: Setting) -> Reads:
    """Without room for scratch: the folder's files read whole. Which bytes, and which reader reads
    which, come from the check's own functions: ``segments`` of every file up to data_size (as
    ``IO._read_set``'s fallback), split by ``reads.spans``; rand_read keeps the first 128 files."""
    io = at.io(None)
    at.notes["without room for scratch"] = io.reads(at.found)[0].note
    parts = segments(at.found.files, at.number("data_size"))
    runs = reads.spans(parts, at.number("readers"), at.number("block_size"))
    quarters = [list(dict.fromkeys(name for name, _, _ in run)) for run in runs]
    first = list(dict.fromkeys(name for name, _, _ in parts))[:MAX_RANDOM_FILES]  # (soft nofile >= 512)
    seq_job = whole_files_jobs(quarters, os.path.join(at.links, "seq"), at.block)
    return Reads("small files read whole", io, parts, seq_job,
                 ["--file_service_type=random", "--name=rand", *linked(first, os.path.join(at.links, "rand"))])


def read_pairs(at: Setting, chosen: Reads) -> list[Pair]:
    """seq_read, then rand_read twice: against fio's libaio job, and against 32 psync jobs.

    Each pair runs one metric back to back on both sides, so that both see the same load."""
    names = list(dict.fromkeys(name for name, _, _ in chosen.parts))
    bypass = bypass_for(names[:100], at.fs.memory_backed)
    depth, label = at.number("rand_depth"), chosen.label

    def seq_ours() -> dict[str, float]:
        warm(names)
        return {f"seq_read, {label}": chosen.io.seq_read(chosen.parts, bypass, label).value}

    def seq_fio() -> dict[str, float]:
        warm(names)
        return {f"seq_read, {label}": fio(at.seconds, *chosen.seq_job)["read"]["bw_bytes"] / 1e6}

    def rand_ours(suffix: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            warm(names)
            iops, p50, p99 = chosen.io.rand_read(chosen.parts, bypass, label)
            return {f"rand_read, {label}{suffix}": iops.value, f"rand_read_p50, {label}{suffix}": p50.value,
                    f"rand_read_p99, {label}{suffix}": p99.value}
        return run

    def rand_fio(shape: list[str], suffix: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            warm(names)
            job = fio(at.seconds, *shape, *chosen.rand_files)
            return {f"rand_read, {label}{suffix}": job["read"]["iops"],
                    f"rand_read_p50, {label}{suffix}": latency_ms(job, "50.000000"),
                    f"rand_read_p99, {label}{suffix}": latency_ms(job, "99.000000")}
        return run

    return [Pair(seq_ours, seq_fio), Pair(rand_ours(""), rand_fio(rand_read_args(depth), "")),
            Pair(rand_ours(f", {SYNC}"), rand_fio(rand_read_sync_args(depth), f", {SYNC}"))]


def table(series: Mapping[str, list[tuple[float, float]]]) -> list[tuple[Any, ...]]:
    """Each round's pair, then the medians and the median ratio with its verdict, per metric; then
    rand_read's latency percentiles (fio's psync clat: the whole synchronous read, as preflight's)."""
    rows: list[tuple[Any, ...]] = []
    for label, unit in COMPARED.items():
        pairs = series[label]
        rows += [(f"  {label}, round {run}", ours, theirs, unit, "") for run, (ours, theirs) in enumerate(pairs, 1)]
        ratio = median_ratio(pairs)
        rows.append((f"{label}, median", median(o for o, _ in pairs), median(t for _, t in pairs), unit,
                     verdict(ratio), ratio))
    for label in LATENCIES:
        pairs = series[label]
        rows.append((f"{label}, median", median(o for o, _ in pairs), median(t for _, t in pairs), "ms", "info",
                     median_ratio(pairs)))
    return rows


def header(args: argparse.Namespace, found: Found, fs: Filesystem, block: int, load_before: float) -> str:
    sizes = [f.size for f in found.files]
    mean = sum(sizes) / len(sizes)
    return (f"storage vs fio on an ImageNet-shaped folder: {args.classes} classes x {args.per_class} files of "
            f"{min(sizes) / 1e3:.0f}-{max(sizes) / 1e3:.0f} kB on {fs.describe()}; {args.rounds} paired rounds of "
            f"{args.seconds:g}s per metric and tool; load average {load_before:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after\n"
            f"fio's whole-file jobs read {block // 1024} KiB of each file, preflight all of it "
            f"({mean / 1e3:.1f} kB on average): MB/s ratios carry up to x{mean / block:.3f} in preflight's favour")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the folder is built (default: /tmp)")
    parser.add_argument("--classes", type=int, default=10, help="class folders")
    parser.add_argument("--per-class", type=int, default=100, help="files per class folder")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration per metric and round, both tools")
    parser.add_argument("--rounds", type=int, default=9, help="paired rounds (>= 2)")
    args = parser.parse_args()
    if not shutil.which("fio"):
        print("bench/storage_vs_fio_imagenet: fio is not installed: apt-get install fio", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    with scratch_root(args.dir) as work:
        folder = str(imagenet(Path(work) / "train", args.classes, args.per_class))
        at = Setting(folder, args.seconds, os.path.join(work, "fio-links"))
        parent, no_scratch = choose_parent(folder, at.options["scratch_dir"], "storage.scratch_dir")
        if parent is None:
            raise SystemExit(f"bench: {no_scratch}")
        with scratch_dir(parent, protect=folder) as scratch:
            pairs = [*read_pairs(at, on_scratch(at, scratch)), small_files(at), *read_pairs(at, read_whole(at))]
            series = paired_rounds(args.rounds, pairs,
                                   after=lambda run: print(f"round {run} of {args.rounds} done", file=sys.stderr))
    print(header(args, at.found, at.fs, at.block, load_before))
    for case, note in at.notes.items():
        print(f"seq_read/rand_read {case}, as the check's rows note: {note}")
    print_table(table(series))
    print("(a median row's ratio is the median of the rounds' paired ratios; target 0.85-1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
