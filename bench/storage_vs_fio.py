"""preflight's storage metrics against fio, same parameters, same files, one run.

Usage: python3 bench/storage_vs_fio.py [--dir DIR] [--size "512 MiB"] [--seconds 3] [--rounds 9]

seq_read and rand_read alternate preflight and fio for several rounds (the machine may be
shared: alternating puts other load on both alike) and compare the medians. Before each
measurement the data file is read once through the page cache (buffered), so a
figure that ignored O_DIRECT/fadvise would show up as far above fio's. The preflight side
runs the storage check's own code (``measure_io.IO``) with its defaults; the fio side is
the documented equivalent of each metric:

  seq_read     fio --rw=read --direct=1 --bs=1M --ioengine=psync --numjobs=R --offset_increment=S/R
  rand_read    fio --rw=randread --direct=1 --bs=4k --ioengine=libaio --numjobs=4 --iodepth=8 (32 in flight,
               from as many processes as preflight uses)
  small_files  fio --rw=read --direct=1 --bs=<file size> --openfiles=1 --numjobs=8 --opendir=<the same files>
  seq_write    fio --rw=write --bs=1M --size=128M --end_fsync=1
  fsync_p99    fio --rw=write --bs=4k --fsync=1 --file_append=1 (appends, as ours; sync latency p99)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.fio_reference import (Pair, fio, latency_ms, paired_rounds, print_table, rand_read_args,  # noqa: E402
                                 seq_read_args, warm)
from preflight.checks import storage  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402
from preflight.io.scratch import write_file, write_small_files  # noqa: E402
from preflight.checks.storage.data import segments, survey  # noqa: E402
from preflight.checks.storage.measure_io import IO  # noqa: E402
from preflight.config import coerce_option  # noqa: E402
from preflight.host.fsinfo import filesystem_of  # noqa: E402
from preflight.io.uncached import bypass_for  # noqa: E402
from preflight.units import UnitError, parse_quantity, Dimension  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=os.getcwd(), help="directory on the filesystem to test (default: cwd)")
    parser.add_argument("--size", default="512 MiB", help="data file size")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration per metric and round, both tools")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds of seq_read and rand_read (>= 2)")
    args = parser.parse_args()
    if not shutil.which("fio"):
        print("bench/storage_vs_fio: fio is not installed: apt-get install fio", file=sys.stderr)
        return 2
    try:
        size = int(parse_quantity(args.size, Dimension.SIZE))
    except UnitError as error:
        print(f"bench/storage_vs_fio: --size: {error}", file=sys.stderr)
        return 2
    options = {o.name: coerce_option(o, None, o.name) for o in storage.OPTIONS}
    readers, depth, file_readers = options["readers"], options["rand_depth"], options["file_readers"]
    work = tempfile.mkdtemp(prefix=".preflight-bench-", dir=args.dir)
    try:
        data = write_file(os.path.join(work, "data.bin"), size, os.urandom(1 << 20))
        parts = segments([data], size)  # IO.seq_read and rand_read take (file, start, end) segments
        fs = filesystem_of(work)
        io = IO(options, Budget(args.seconds, 600), fs, work, "")
        bypass = bypass_for(data.name, fs.memory_backed)

        def seq_read_ours() -> dict[str, float]:
            warm(data.name)
            return {"seq_read": float(io.seq_read(parts, bypass, "bench").value)}

        def seq_read_fio() -> dict[str, float]:
            warm(data.name)
            job = fio(args.seconds, f"--filename={data.name}", *seq_read_args(size, readers))
            return {"seq_read": job["read"]["bw_bytes"] / 1e6}

        seq = paired_rounds(args.rounds, [Pair(seq_read_ours, seq_read_fio)])["seq_read"]
        seq_ours, seq_fio = [o for o, _ in seq], [f for _, f in seq]
        rows = [(f"  seq_read round {run}", o, f, "MB/s", "") for run, (o, f) in enumerate(seq, 1)]
        rows.append((f"seq_read ({readers} readers, 1 MiB), median", median(seq_ours), median(seq_fio), "MB/s",
                     "within 10%", median(o / f for o, f in seq)))
        # The end-to-end criterion: one reader against fio's default single job, same file.
        one_reader = IO({**options, "readers": 1}, Budget(args.seconds, 600), fs, work, "")
        warm(data.name)
        single_ours = float(one_reader.seq_read(parts, bypass, "bench").value)
        warm(data.name)
        single = fio(args.seconds, f"--filename={data.name}", "--rw=read", "--direct=1", "--bs=1M", "--ioengine=psync")
        rows.append(("seq_read 1 reader vs fio 1 job --bs=1M", single_ours, single["read"]["bw_bytes"] / 1e6, "MB/s",
                     "within 25% (e2e)"))
        rand = []
        for run in range(1, args.rounds + 1):
            warm(data.name)
            iops, p50, p99 = io.rand_read(parts, bypass, "bench")
            warm(data.name)
            theirs = fio(args.seconds, f"--filename={data.name}", *rand_read_args(depth))
            rand.append((iops.value, theirs["read"]["iops"], p50.value, latency_ms(theirs, "50.000000"), p99.value,
                         latency_ms(theirs, "99.000000")))
            rows.append((f"  rand_read round {run}", rand[-1][0], rand[-1][1], "IOPS", ""))
        column = lambda i: median(r[i] for r in rand)  # noqa: E731
        rows += [(f"rand_read ({depth} in flight, 4 KiB), median", column(0), column(1), "IOPS", "within 15%",
                  median(r[0] / r[1] for r in rand)),
                 ("rand_read_p50, median", column(2), column(3), "ms", "info"),
                 ("rand_read_p99, median", column(4), column(5), "ms", "info")]
        small_size = int(options["small_file_size"]) * 7 // 8
        write_small_files(work, int(options["small_file_count"]), small_size)
        files, rate = io.small(survey(os.path.join(work, "small"), 0, int(options["small_file_size"]),
                                      int(options["max_files"])))
        theirs = fio(args.seconds, f"--opendir={os.path.join(work, 'small')}", "--rw=read", "--direct=1",
                     f"--bs={small_size}", "--openfiles=1", "--file_service_type=sequential", "--ioengine=psync",
                     f"--numjobs={file_readers}")
        fio_files = theirs["read"]["total_ios"] / (theirs["read"]["runtime"] / 1e3)
        rows.append((f"small_files ({file_readers} readers)", files.value, fio_files, "files/s", "info"))
        wrote = io.writes()
        theirs = fio(args.seconds, f"--filename={os.path.join(work, 'fio-write.dat')}", "--rw=write", "--bs=1M",
                     "--size=128M", "--end_fsync=1", "--ioengine=psync", "--loops=4")
        rows.append(("seq_write (128 MiB + fsync)", wrote[0].value, theirs["write"]["bw_bytes"] / 1e6, "MB/s", "info"))
        theirs = fio(args.seconds / 2, f"--filename={os.path.join(work, 'fio-fsync.dat')}", "--rw=write", "--bs=4k",
                     "--fsync=1", "--size=64M", "--file_append=1", "--ioengine=psync")
        rows.append(("fsync_p99 (4 KiB + fsync)", wrote[1].value, theirs["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e6,
                     "ms", "info"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"storage vs fio on {fs.describe()}, {args.size} file, {args.seconds:g}s per metric and round, page cache warmed "
          f"before each; preflight method: {bypass}")
    print_table(rows)
    print("(a median row's ratio is the median of the rounds' paired ratios: each round's two runs shared the load)")
    print(f"preflight seq_read twice in a row: {seq_ours[0]:.0f} then {seq_ours[1]:.0f} MB/s, "
          f"ratio {seq_ours[1] / seq_ours[0]:.2f} (target: within 25%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
