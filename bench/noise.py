"""How stable is the gate? Run the bundled storage and dataloader checks N times and print each metric's CV.

The coefficient of variation (stdev / mean of the per-run values, each run's value being
the median its check compares) is the figure MLPerf Storage and fio users quote for
run-to-run stability. The target is relative to fio's own CV for the same job shape in the
same runs (issue 14): a storage metric's CV at most 1.25x fio's, or 5%, whichever is
larger; ``dataloader.throughput`` at most 1.25x fio's (one reader per worker over the same
files), or 10%. Facts (free space, counts, flags) are printed, not judged. Each run goes through the real
runner (a worker process per run, as ``preflight run`` does) over a generated dataset of
ImageNet-sized files (~110 kB each, the mean JPEG size of ImageNet-1k's training set).

    python3 bench/noise.py [--runs 10] [--files 512] [--data DIR] [--set KEY=VALUE ...] [--busy N]

The machine's load average is printed before and after: on a shared machine, quote it
with the numbers. ``--busy N`` keeps N ``yes > /dev/null`` processes spinning through every run
(started and killed by pid, as ``founding_table.busy``): the run-to-run CVs of a busy node, which
``preflight diff`` takes its floors from (``preflight.report.noise.RUN_TO_RUN``).

With fio installed, each run is followed by fio jobs of the same shape over the same files
(``FIO_JOBS``), and fio's own CV is printed beside ours: the disk's run-to-run drift sets a
floor that no tool goes under, so a CV over 10% means something only next to fio's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import scratch_root  # noqa: E402
from bench.founding_table import busy  # noqa: E402
from preflight import config, runner  # noqa: E402
from preflight.checks import CHECKS  # noqa: E402
from preflight.host.cpus import auto_workers  # noqa: E402
from preflight.report.noise import cv, target  # noqa: E402  the CV `preflight diff` judges by; issue 14's targets

FILE_BYTES = 110_000
# As each timed part of the bundled storage check: its 3 s duration shared by 3 parts, a 0.25 s warm-up window first.
FIO_RUNTIME_MS, FIO_RAMP_MS = 750, 250

# metric -> (fio arguments over the dataset, how to read the figure from fio's JSON job).
# Synchronous engines throughout (psync), as preflight's loops are. Whole-file jobs read
# 104 KiB per file in one request: the largest O_DIRECT-aligned size under FILE_BYTES
# (fio reads nothing of a file smaller than its block size).
FIO_JOBS = {
    # preflight reads 1 MiB blocks, but no file here is longer than 104 KiB of aligned bytes:
    "storage.seq_read": (["--rw=read", "--bs=104k", "--numjobs=4"], lambda job: job["read"]["bw_bytes"] / 1e6),
    "storage.rand_read": (["--rw=randread", "--bs=4k", "--numjobs=32"], lambda job: job["read"]["iops"]),
    "storage.small_files": (["--rw=read", "--bs=104k", "--openfiles=1", "--file_service_type=sequential",
                             "--numjobs=8"], lambda job: job["read"]["total_ios"] / (job["read"]["runtime"] / 1e3)),
    # One job per DataLoader worker, whole files in random order:
    "dataloader.throughput": (["--rw=read", "--bs=104k", "--openfiles=1", "--file_service_type=random",
                               f"--numjobs={max(1, auto_workers())}"],
                              lambda job: job["read"]["total_ios"] / (job["read"]["runtime"] / 1e3)),
}
REFERENCE_OF = {  # a figure derived from another's runs is held to that one's fio CV
    "storage.small_files_bandwidth": "storage.small_files",
    "dataloader.bandwidth": "dataloader.throughput",
}
FIO_LATENCY = {  # read from the rand_read job
    "storage.rand_read_p50": "50.000000",
    "storage.rand_read_p99": "99.000000",
}


def make_dataset(directory: Path, files: int) -> None:
    for index in range(files):
        (directory / f"sample-{index:05}.jpg").write_bytes(os.urandom(FILE_BYTES))


def fio(*args: str) -> dict:
    done = subprocess.run(["fio", "--name=noise", "--output-format=json", "--group_reporting", "--direct=1",
                           "--ioengine=psync", "--time_based", f"--runtime={FIO_RUNTIME_MS}ms",
                           f"--ramp_time={FIO_RAMP_MS}ms", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench/noise: fio {' '.join(args)} failed: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout[done.stdout.index("{"):])["jobs"][0]


def fio_run(data: str, scratch: str) -> dict[str, float]:
    """One run of the fio jobs of the same shape as the bundled checks; metric -> value."""
    values = {}
    for metric, (args, figure) in FIO_JOBS.items():
        job = fio(f"--opendir={data}", *args)
        values[metric] = figure(job)
        if metric == "storage.rand_read":
            for latency, key in FIO_LATENCY.items():
                values[latency] = job["read"]["clat_ns"]["percentile"][key] / 1e6
    job = fio(f"--filename={os.path.join(scratch, 'write.dat')}", "--rw=write", "--bs=1M", "--size=128M",
              "--end_fsync=1", "--direct=0", "--time_based=0", "--runtime=0", "--ramp_time=0")
    values["storage.seq_write"] = job["write"]["bw_bytes"] / 1e6
    os.unlink(os.path.join(scratch, "write.dat"))
    job = fio(f"--filename={os.path.join(scratch, 'fsync.dat')}", "--rw=write", "--bs=4k", "--fsync=1",
              "--size=64M", "--file_append=1", "--direct=0", f"--runtime={FIO_RUNTIME_MS}ms")
    values["storage.fsync_p99"] = job["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e6
    os.unlink(os.path.join(scratch, "fsync.dat"))
    return values


def limit(metric: str, fio_cv: float | None) -> float:
    """The largest CV that meets the target for ``metric``, given fio's CV for the same shape (None: no fio job)."""
    return target(metric) if fio_cv is None else max(target(metric), 1.25 * fio_cv)


def is_performance(metric: str) -> bool:
    """A measured rate or latency (``Metric.is_performance``); facts are printed, not judged."""
    check, name = metric.split(".", 1)
    return next(m for m in CHECKS[check].METRICS if m.name == name).is_performance


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--files", type=int, default=512, help="files in the generated dataset")
    parser.add_argument("--data", help="an existing dataset directory instead of a generated one")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="as `preflight run --set`")
    parser.add_argument("--no-fio", action="store_true", help="skip the fio reference runs")
    parser.add_argument("--busy", type=int, default=0, help="`yes > /dev/null` processes spinning through every run")
    args = parser.parse_args()
    with_fio = not args.no_fio and shutil.which("fio") is not None
    with scratch_root() as generated, busy(args.busy):
        data = args.data or generated
        if not args.data:
            make_dataset(Path(generated), args.files)
        loaded = config.load(str(config.bundled_path()), args.overrides, environ={"DATA_DIR": data})
        loaded = loaded.select(["storage", "dataloader"])
        print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs; {args.busy} x `yes > /dev/null`; "
              f"dataset {data}")
        values: dict[str, list[float]] = {}
        methods: dict[str, str] = {}
        reference: dict[str, list[float]] = {}  # fio's figures, run by run
        for number in range(1, args.runs + 1):
            start = time.monotonic()
            results = runner.run(loaded)
            line = []
            for result in results:
                if isinstance(result.value, float):
                    values.setdefault(result.id, []).append(result.value)
                    methods[result.id] = result.method
                    line.append(f"{result.id}={result.value:.1f} {result.unit}")
                elif result.verdict == "error":
                    line.append(f"{result.id}=ERROR {result.message}")
            print(f"run {number:2}: {', '.join(line)} ({time.monotonic() - start:.1f}s)", flush=True)
            if with_fio:
                for metric, value in fio_run(data, generated).items():
                    reference.setdefault(metric, []).append(value)
        print(f"load average after: {os.getloadavg()}")
        print(f"{'metric':28} {'n':>3} {'mean':>10} {'stdev':>9} {'CV':>7} {'fio CV':>7} {'limit':>7}  verdict")
        missed = []
        judged = [metric for metric in values if is_performance(metric)]
        for metric, series in values.items():
            source = REFERENCE_OF.get(metric, metric)
            fio_cv = cv(reference[source]) if source in reference else None
            most = limit(metric, fio_cv)
            if metric in judged and cv(series) > most:
                missed.append(metric)
            theirs = f"{fio_cv:7.1%}" if fio_cv is not None else f"{'-':>7}"
            verdict = ("ok" if cv(series) <= most else "TOO NOISY") if metric in judged else "a fact: not judged"
            print(f"{metric:28} {len(series):3} {statistics.fmean(series):10.4g} "
                  f"{statistics.stdev(series) if len(series) > 1 else 0.0:9.3g} {cv(series):7.1%} {theirs} "
                  f"{most if metric in judged else 0:7.1%}  {verdict}")
        print(f"limit: max(1.25 x fio's CV, 5%; 10% for the dataloader); {len(judged) - len(missed)} of "
              f"{len(judged)} performance metrics within it" + (f"; over: {', '.join(missed)}" if missed else ""))
        if reference:
            print("fio jobs (each run, right after preflight's, same files, psync, "
                  f"{FIO_RUNTIME_MS}ms after a {FIO_RAMP_MS}ms ramp):")
            for metric, (fio_args, _) in FIO_JOBS.items():
                print(f"  {metric}: fio --opendir=DATA {' '.join(fio_args)}")
            print("  storage.seq_write: fio --rw=write --bs=1M --size=128M --end_fsync=1")
            print("  storage.fsync_p99: fio --rw=write --bs=4k --fsync=1 --file_append=1 (sync p99)")
        for metric, method in methods.items():
            print(f"  {metric}: {method}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
