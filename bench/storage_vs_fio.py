"""preflight's storage metrics against fio, same parameters, same files, paired round by round.

Usage: python3 bench/storage_vs_fio.py [--dir DIR] [--size "512 MiB"] [--seconds 3] [--rounds 7]

Every metric is measured by preflight and by fio in each round, back to back, who goes
first alternating (``fio_reference.paired_rounds``: the machine may be shared, and
alternating puts other load on both alike); each metric's figure is the median of the
rounds' paired ratios, with a one-line verdict against its target (issue 14). Before each
read the data is read once through the page cache (buffered), so a figure that ignored
O_DIRECT/fadvise would show up as far above fio's. The preflight side runs the storage
check's own code (``measure_io.IO``) with its defaults; the fio side is the documented
equivalent of each metric:

  seq_read       fio --rw=read --direct=1 --bs=1M --ioengine=psync --numjobs=R --offset_increment=S/R
  rand_read      fio --rw=randread --direct=1 --bs=4k --ioengine=libaio --numjobs=4 --iodepth=8: 32
                 in flight from as many processes as preflight uses, the same jobs x depth (the
                 latency target is against this job); and --ioengine=psync --numjobs=32: 32
                 synchronous requests, each timed as one pread as preflight's are, from 32
                 processes (on a small VM, their wait for a CPU lands in fio's latency)
  small_files    fio --rw=read --direct=1 --bs=<file size> --openfiles=1 --numjobs=8 --opendir=<the same files>
  seq_write      fio --rw=write --bs=1M --size=128M --end_fsync=1
  fsync_p99      fio --rw=write --bs=4k --fsync=1 --file_append=1 (appends, as ours; sync latency p99)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import defaults, per_storage_part, scratch_root  # noqa: E402
from bench.fio_reference import (Figures, Pair, fio, files_per_second, latency_ms, median_ratio,  # noqa: E402
                                 paired_rounds, print_table, rand_read_args, rand_read_sync_args, seq_read_args, warm)
from preflight.io.scratch import write_file, write_small_files  # noqa: E402
from preflight.checks.storage.data import segments, survey  # noqa: E402
from preflight.checks.storage.measure_io import IO  # noqa: E402
from preflight.host.fsinfo import filesystem_of  # noqa: E402
from preflight.io.uncached import bypass_for  # noqa: E402
from preflight.units import UnitError, parse_quantity, Dimension  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=os.getcwd(), help="directory on the filesystem to test (default: cwd)")
    parser.add_argument("--size", default="512 MiB", help="data file size")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration per metric and round, both tools")
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds (>= 2)")
    args = parser.parse_args()
    if not shutil.which("fio"):
        print("bench/storage_vs_fio: fio is not installed: apt-get install fio", file=sys.stderr)
        return 2
    try:
        size = int(parse_quantity(args.size, Dimension.SIZE))
    except UnitError as error:
        print(f"bench/storage_vs_fio: --size: {error}", file=sys.stderr)
        return 2
    options = defaults("storage")
    readers, depth, file_readers = options["readers"], options["rand_depth"], options["file_readers"]
    small_size = int(options["small_file_size"]) * 7 // 8
    with scratch_root(args.dir) as work:
        data = write_file(os.path.join(work, "data.bin"), size, os.urandom(1 << 20))
        parts = segments([data], size)  # IO.seq_read and rand_read take (file, start, end) segments
        small = os.path.join(work, "small")
        write_small_files(work, int(options["small_file_count"]), small_size)
        fs = filesystem_of(work)
        io = IO(options, per_storage_part(args.seconds), fs, work, "")
        bypass = bypass_for(data.name, fs.memory_backed)
        pairs = _pairs(io, parts, bypass, data.name, small, size, args.seconds, options)
        series = paired_rounds(args.rounds, pairs)
    print(f"storage vs fio on {fs.describe()}, {args.size} file, {args.seconds:g}s per metric and round, "
          f"{args.rounds} paired rounds; page cache warmed before each read; preflight method: {bypass}")
    rows = []
    for label, (unit, low, high) in TARGETS.items():
        rounds = series[label]
        rows += [(f"  {label}, round {run}", o, f, unit, "") for run, (o, f) in enumerate(rounds, 1)]
        ratio = median_ratio(rounds)
        rows.append((f"{label}, median", median(o for o, _ in rounds), median(f for _, f in rounds), unit,
                     _verdict(ratio, low, high), ratio))
    print_table(rows)
    print("(a median row's ratio is the median of the rounds' paired ratios: each round's two runs shared the load)")
    missed = [label for label, (_, low, high) in TARGETS.items() if low and not low <= median_ratio(series[label]) <= high]
    print(f"{len(TARGETS) - len(missed)} of {len(TARGETS)} metrics meet their target"
          + (f"; missed: {', '.join(missed)}" if missed else ""))
    return 0


# label -> (unit, lowest and highest ratio preflight / fio that meet the target; 0, 0: no target)
TARGETS = {
    "seq_read": ("MB/s", 0.9, 1.1),
    "rand_read vs fio psync x32": ("IOPS", 0.85, 1.15),
    "rand_read vs fio libaio 4x8": ("IOPS", 0.85, 1.15),
    "rand_read_p50 vs fio libaio 4x8": ("ms", 0.0, 0.0),
    "rand_read_p99 vs fio libaio 4x8": ("ms", 1 / 1.3, 1.3),
    "rand_read_p50 vs fio psync x32": ("ms", 0.0, 0.0),
    "rand_read_p99 vs fio psync x32": ("ms", 0.0, 0.0),
    "small_files": ("files/s", 0.85, 1.15),
    "seq_write": ("MB/s", 0.9, 1.1),
    "fsync_p99": ("ms", 1 / 1.3, 1.3),
}


def _verdict(ratio: float, low: float, high: float) -> str:
    if not low:
        return "no target"
    target = f"within {high:g}x" if high >= 1.3 else f"within {round((high - 1) * 100)}%"
    return target if low <= ratio <= high else f"MISSES {target} ({'over' if ratio > high else 'under'} fio)"


def _pairs(io: IO, parts: list, bypass: str, data: str, small: str, size: int, seconds: float,
           options: dict) -> list[Pair]:
    """One Pair per group of metrics: preflight's own code, and fio's equivalent job(s)."""
    readers, depth, file_readers = options["readers"], options["rand_depth"], options["file_readers"]
    small_size = int(options["small_file_size"]) * 7 // 8

    def seq_ours() -> Figures:
        warm(data)
        return {"seq_read": float(io.seq_read(parts, bypass, "bench").value)}

    def seq_fio() -> Figures:
        warm(data)
        return {"seq_read": fio(seconds, f"--filename={data}", *seq_read_args(size, readers))["read"]["bw_bytes"] / 1e6}

    def rand_ours() -> Figures:
        warm(data)
        iops, p50, p99 = io.rand_read(parts, bypass, "bench")
        return {"rand_read vs fio psync x32": iops.value, "rand_read vs fio libaio 4x8": iops.value,
                "rand_read_p50 vs fio libaio 4x8": p50.value, "rand_read_p99 vs fio libaio 4x8": p99.value,
                "rand_read_p50 vs fio psync x32": p50.value, "rand_read_p99 vs fio psync x32": p99.value}

    def rand_fio() -> Figures:
        warm(data)
        sync = fio(seconds, f"--filename={data}", *rand_read_sync_args(depth))
        warm(data)
        aio = fio(seconds, f"--filename={data}", *rand_read_args(depth))
        return {"rand_read vs fio psync x32": sync["read"]["iops"], "rand_read vs fio libaio 4x8": aio["read"]["iops"],
                "rand_read_p50 vs fio libaio 4x8": latency_ms(aio, "50.000000"),
                "rand_read_p99 vs fio libaio 4x8": latency_ms(aio, "99.000000"),
                "rand_read_p50 vs fio psync x32": latency_ms(sync, "50.000000"),
                "rand_read_p99 vs fio psync x32": latency_ms(sync, "99.000000")}

    def small_ours() -> Figures:
        files, _ = io.small(survey(small, 0, int(options["small_file_size"]), int(options["max_files"])))
        return {"small_files": float(files.value)}

    def small_fio() -> Figures:
        job = fio(seconds, f"--opendir={small}", "--rw=read", "--direct=1", f"--bs={small_size}", "--openfiles=1",
                  "--file_service_type=sequential", "--ioengine=psync", f"--numjobs={file_readers}")
        return {"small_files": files_per_second(job)}

    def writes_ours() -> Figures:
        wrote = io.writes()
        return {"seq_write": float(wrote[0].value), "fsync_p99": float(wrote[1].value)}

    def writes_fio() -> Figures:
        scratch = os.path.dirname(data)
        write = fio(seconds, f"--filename={os.path.join(scratch, 'fio-write.dat')}", "--rw=write", "--bs=1M",
                    "--size=128M", "--end_fsync=1", "--ioengine=psync")  # one new file, as ours: a checkpoint
        sync = fio(seconds / 2, f"--filename={os.path.join(scratch, 'fio-fsync.dat')}", "--rw=write", "--bs=4k",
                   "--fsync=1", "--size=64M", "--file_append=1", "--ioengine=psync")
        for name in ("fio-write.dat", "fio-fsync.dat"):
            os.unlink(os.path.join(scratch, name))
        return {"seq_write": write["write"]["bw_bytes"] / 1e6,
                "fsync_p99": sync["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e6}

    return [Pair(seq_ours, seq_fio), Pair(rand_ours, rand_fio), Pair(small_ours, small_fio),
            Pair(writes_ours, writes_fio)]


if __name__ == "__main__":
    sys.exit(main())
