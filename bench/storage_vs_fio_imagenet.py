"""The storage check on an ImageNet-shaped folder against fio over the same files, paired rounds.

Usage: python3 bench/storage_vs_fio_imagenet.py [--dir DIR] [--classes 10] [--per-class 100]
                                                [--seconds 2] [--rounds 7]

Builds ``tests.datasets.imagenet`` (class folders of 110-113 kB files) in a temporary
directory under --dir, points the storage check at it with its defaults, and compares
each metric as the check measures it on such a folder with the fio job that does the same
I/O on the same inodes, in paired rounds (``fio_reference``); target: every median ratio
within 15%.

  small_files, small_files_bandwidth: the check's 8 loops (4 processes x 2 threads) each
      open, read whole with one O_DIRECT request and close files i, i+8, i+16 ... of the
      folder, round and round. fio: 8 jobs, job i over the same files in the same order
      (hard links in a folder of its own), --rw=read --direct=1 --bs=104k --openfiles=1
      --file_service_type=sequential --ioengine=psync --invalidate=0 --fadvise_hint=0.
  seq_read, rand_read on a scratch file: no file here is 8 MiB or more, so the check writes
      data_size (256 MiB) beside the folder and reads that instead (its row says so). fio
      reads the same file after it, with bench/storage_vs_fio.py's jobs (rand_read: libaio,
      4 jobs x 8 deep), and rand_read again with 32 psync jobs, preflight's own method.
  seq_read, rand_read over the small files read whole: what the check does when there is
      no room for scratch. seq_read's 4 reader threads take contiguous quarters of the
      files and read each whole with one 1 MiB request; fio: 4 jobs over the same quarters,
      as small_files' jobs. rand_read reads random 4 KiB blocks of the first 128 files, 32 in
      flight; fio: the same two rand_read jobs over those 128 files, --file_service_type=random.

fio reads nothing of a file shorter than its block size (--bs=1M over these files reads 0
bytes) and cannot read a file's last, partial 4 KiB block with O_DIRECT: its whole-file jobs
read 104 KiB of each file (the largest 4 KiB multiple every file holds), where preflight
reads every byte. Files/s compare like for like; MB/s carry 5-6% in preflight's favour.

The page cache is warmed (a buffered read) before each run over the folder's files, so a
figure that ignored O_DIRECT would stand out; not before the scratch-file rows: the check
writes that file afresh and drops it from the cache each time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any, Mapping, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.fio_reference import (Pair, fio, files_per_second, latency_ms, median_ratio, paired_rounds,  # noqa: E402
                                 print_table, rand_read_args, rand_read_sync_args, seq_read_args, verdict, warm)
from preflight.checks import storage  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402
from preflight.checks.storage import reads  # noqa: E402
from preflight.checks.storage.data import Found, segments, survey  # noqa: E402
from preflight.checks.storage.measure_io import IO, MAX_RANDOM_FILES  # noqa: E402
from preflight.config import coerce_option  # noqa: E402
from preflight.fsinfo import Filesystem, filesystem_of  # noqa: E402
from preflight.io_uncached import ALIGNMENT  # noqa: E402
from preflight.scratch import choose_parent, scratch_dir  # noqa: E402
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
    "rand_read, small files": "IOPS",
    f"rand_read, small files, {SYNC}": "IOPS",
}
LATENCIES = (f"rand_read_p50, scratch file, {SYNC}", f"rand_read_p99, scratch file, {SYNC}")


class Setting:
    """The storage check's defaults on one folder, and what the bench needs beside them."""

    def __init__(self, folder: str, seconds: float, links: str) -> None:
        self.options = {o.name: coerce_option(o, None, o.name) for o in storage.OPTIONS}
        self.options["path"] = folder
        self.seconds, self.links = seconds, links
        self.budget, self.fs = Budget(seconds, 600), filesystem_of(folder)
        self.found = survey(folder, int(self.options["data_size"]), int(self.options["small_file_size"]),
                            int(self.options["max_files"]))
        # fio reads nothing of a file shorter than --bs: the largest 4 KiB multiple every file holds
        self.block = min(f.size for f in self.found.files) // ALIGNMENT * ALIGNMENT

    def io(self, scratch: str | None) -> IO:
        return IO(self.options, self.budget, self.fs, scratch, "" if scratch else "no room for scratch (the bench)")

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


def scratch_reads(at: Setting, scratch: str, notes: dict[str, str]) -> Pair:
    """seq_read and rand_read where the check has room for scratch: on the file it writes there."""
    io = at.io(scratch)

    def ours() -> dict[str, float]:
        measured = {m.metric: m for m in io.reads(at.found)}
        notes.setdefault("scratch", measured["seq_read"].note)
        return {"seq_read, scratch file": measured["seq_read"].value,
                "rand_read, scratch file": measured["rand_read"].value,
                f"rand_read, scratch file, {SYNC}": measured["rand_read"].value,
                LATENCIES[0]: measured["rand_read_p50"].value, LATENCIES[1]: measured["rand_read_p99"].value}

    def theirs() -> dict[str, float]:
        written = [entry for entry in os.scandir(scratch) if entry.is_file()]
        assert len(written) == 1, f"expected the check's one scratch file in {scratch}, found {written}"
        target, size = f"--filename={written[0].path}", written[0].stat().st_size
        seq = fio(at.seconds, target, *seq_read_args(size, at.number("readers")))
        rand = fio(at.seconds, target, *rand_read_args(at.number("rand_depth")))
        sync = fio(at.seconds, target, *rand_read_sync_args(at.number("rand_depth")))
        return {"seq_read, scratch file": seq["read"]["bw_bytes"] / 1e6,
                "rand_read, scratch file": rand["read"]["iops"],
                f"rand_read, scratch file, {SYNC}": sync["read"]["iops"],
                LATENCIES[0]: latency_ms(sync, "50.000000"), LATENCIES[1]: latency_ms(sync, "99.000000")}

    return Pair(ours, theirs)


def small_files_read_whole(at: Setting) -> Pair:
    """seq_read and rand_read where the check has no room for scratch: over the folder's files.

    Which bytes, and which reader reads which, are the check's own functions: ``segments`` of
    every file up to data_size (as ``IO._read_set``'s fallback), split by ``reads.spans``.
    """
    parts = segments(at.found.files, at.number("data_size"))
    runs = reads.spans(parts, at.number("readers"), at.number("block_size"))
    quarters = [list(dict.fromkeys(name for name, _, _ in run)) for run in runs]
    seq_job = whole_files_jobs(quarters, os.path.join(at.links, "seq"), at.block)
    read = list(dict.fromkeys(name for name, _, _ in parts))
    some = linked(read[:MAX_RANDOM_FILES], os.path.join(at.links, "rand"))  # rand_read's files (soft nofile >= 512)
    rand_job = [*rand_read_args(at.number("rand_depth")), "--file_service_type=random", "--name=rand", *some]
    sync_job = [*rand_read_sync_args(at.number("rand_depth")), "--file_service_type=random", "--name=rand", *some]
    io = at.io(None)

    def ours() -> dict[str, float]:
        warm(read)
        measured = {m.metric: m for m in io.reads(at.found)}
        return {"seq_read, small files read whole": measured["seq_read"].value,
                "rand_read, small files": measured["rand_read"].value,
                f"rand_read, small files, {SYNC}": measured["rand_read"].value}

    def theirs() -> dict[str, float]:
        figures = {}
        for label, job, figure in (("seq_read, small files read whole", seq_job, lambda j: j["read"]["bw_bytes"] / 1e6),
                                   ("rand_read, small files", rand_job, lambda j: j["read"]["iops"]),
                                   (f"rand_read, small files, {SYNC}", sync_job, lambda j: j["read"]["iops"])):
            warm(read)
            figures[label] = figure(fio(at.seconds, *job))
        return figures

    return Pair(ours, theirs)


def table(series: Mapping[str, list[tuple[float, float]]]) -> list[tuple[Any, ...]]:
    """Each round's pair, then the medians and the median ratio with its verdict, per metric."""
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
            f"({mean / 1e3:.1f} kB on average): MB/s ratios carry x{mean / block:.3f} in preflight's favour")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the folder is built (default: /tmp)")
    parser.add_argument("--classes", type=int, default=10, help="class folders")
    parser.add_argument("--per-class", type=int, default=100, help="files per class folder")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration per metric and round, both tools")
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds (>= 2)")
    args = parser.parse_args()
    if not shutil.which("fio"):
        print("bench/storage_vs_fio_imagenet: fio is not installed: apt-get install fio", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix=".preflight-bench-", dir=args.dir)
    notes: dict[str, str] = {}
    try:
        folder = str(imagenet(Path(work) / "train", args.classes, args.per_class))
        at = Setting(folder, args.seconds, os.path.join(work, "fio-links"))
        parent, no_scratch = choose_parent(folder, at.options["scratch_dir"], "storage.scratch_dir")
        if parent is None:
            raise SystemExit(f"bench: {no_scratch}")
        with scratch_dir(parent, protect=folder) as scratch:
            # Round 1 runs preflight first, so the check's scratch file exists when fio looks for it.
            series = paired_rounds(args.rounds, [scratch_reads(at, scratch, notes), small_files(at),
                                                 small_files_read_whole(at)],
                                   after=lambda run: print(f"round {run} of {args.rounds} done", file=sys.stderr))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(header(args, at.found, at.fs, at.block, load_before))
    print(f"seq_read/rand_read with room for scratch, as the check's row notes: {notes['scratch']}")
    print_table(table(series))
    print("(a median row's ratio is the median of the rounds' paired ratios; target 0.85-1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
