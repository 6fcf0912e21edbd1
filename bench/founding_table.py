"""The founding table behind a read throttle: the DataLoader check against bandwidth / mean file size.

Usage: python3 bench/founding_table.py [--rates 88,286] [--runs 2] [--duration 4s] [--worker-pools N]
                                      [--per-class 100] [--dir DIR]
       (as root: it makes a loop device, mounts it, makes a blkio cgroup and drops the page cache)

The figures this project started from (issue 32, DESIGN.md's field notes): the same ImageNet job read
~800 samples/s from a network block volume, ~2,600 from a faster volume class. This bench rebuilds
them: an ImageNet-shaped folder (``tests.datasets.imagenet``: 30 class folders x 100 files of 110-113
kB, 3,000 files) on a fresh ext4 image, attached to a loop device with direct I/O on its backing file
(``losetup --direct-io=on``, so the host's page cache under the image does not serve it), and read by
``preflight run`` with one dataloader check (batch 64, 2 workers, ``duration: 4s``, the rest at their
defaults, or --worker-pools) inside a blkio cgroup whose read throttle on that loop device is each --rates figure in MB/s
(cgroup v1 ``blkio.throttle.read_bps_device``; v2 ``io.max`` where v1 is absent). The expected rate is
the throttle's bandwidth / the dataset's mean file size: 88 MB/s allows 789 samples/s, 286 MB/s 2,564.

Each rate is run --runs times idle, then as many times with both cores busy (one ``yes > /dev/null``
per CPU, started and killed by pid), the page cache dropped before every run; the table gives each
run's samples/s, the expected rate, their ratio and whether it is within 10% (the target), then what
the run read through the throttle (bytes the cgroup read from the loop device, in files' worth: a
figure above the throttle's rate with no bytes behind it would be a cache, not the device), the
device's own rate over as many bytes as the dataset holds (``dd iflag=direct bs=1M`` off the loop
device in the same cgroup, in mean files/s: a throttle is a token bucket that runs ahead of its
setting for a short span, and this is what it gives over the span a pass of 3,000 files takes) and
the load average seen, and what a plain training job's first epoch reads over the same files in the same
cgroup (``job_epoch``: a DataLoader with the same batch and workers, shuffled, each file read whole),
after its first batch and over its whole epoch: the figure the gate exists to predict. Everything it made (mount, loop device, cgroup, load) is undone however it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from statistics import mean
from typing import Iterator, NamedTuple, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import scratch_root  # noqa: E402
from tests.datasets import imagenet  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 0.10  # the target: within 10% of bandwidth / mean file size
CLASSES, PER_CLASS = 30, 100  # 3,000 files of 110-113 kB (tests.datasets.imagenet)
IMAGE_MARGIN = 1.6  # the ext4 image over the folder's bytes: ext4's metadata, room to spare
V1 = Path("/sys/fs/cgroup/blkio")
V2 = Path("/sys/fs/cgroup")


def expected_rate(bandwidth: float, mean_file_size: float) -> float:
    """Samples/s a read throttle of ``bandwidth`` bytes/s allows when each sample is one file of ``mean_file_size``
    bytes read once: bandwidth / mean file size (the founding table's arithmetic). Raises ValueError on a size <= 0."""
    if mean_file_size <= 0:
        raise ValueError(f"mean file size must be positive, not {mean_file_size}")
    return bandwidth / mean_file_size


def within(measured: float, expected: float, tolerance: float = TOLERANCE) -> bool:
    """Whether ``measured`` lies within ``tolerance`` (a fraction) of ``expected``, on either side."""
    return abs(measured / expected - 1) <= tolerance


def throttle_line(device: int, bytes_per_s: int, v2: bool = False) -> str:
    """What a blkio cgroup's throttle file takes to limit reads from ``device`` (an st_rdev) to ``bytes_per_s``:
    v1 ``blkio.throttle.read_bps_device`` "MAJ:MIN BPS", v2 ``io.max`` "MAJ:MIN rbps=BPS"."""
    where = f"{os.major(device)}:{os.minor(device)}"
    return f"{where} rbps={bytes_per_s}" if v2 else f"{where} {bytes_per_s}"


def bytes_read(stats: str, device: int) -> int:
    """The bytes read from ``device`` in a cgroup's I/O statistics: v1 ``blkio.throttle.io_service_bytes``
    ("MAJ:MIN Read N" lines) or v2 ``io.stat`` ("MAJ:MIN rbytes=N wbytes=..."); 0 when the device has no line."""
    where = f"{os.major(device)}:{os.minor(device)}"
    for line in stats.splitlines():
        fields = line.split()
        if not fields or fields[0] != where:
            continue
        if len(fields) == 3 and fields[1] == "Read":
            return int(fields[2])
        for field in fields[1:]:
            if field.startswith("rbytes="):
                return int(field.split("=", 1)[1])
    return 0


def dd_seconds(stderr: str) -> float:
    """The seconds dd reports for its copy ("N bytes (...) copied, 1.02 s, 306 MB/s", its last line of stderr).
    Raises ValueError when no such line is there."""
    for line in reversed(stderr.strip().splitlines()):
        if " copied, " in line:
            return float(line.split(" copied, ", 1)[1].split()[0].replace(",", "."))
    raise ValueError(f"no copy time in dd's output: {stderr.strip()[-200:]!r}")


def run_quietly(*command: str) -> str:
    """``command``'s stdout; a failure stops the bench with its stderr."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench: {' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()


class Volume(NamedTuple):
    """The loop device holding the dataset, and how it reads its backing file."""

    mountpoint: Path
    loop: str  # /dev/loopN
    device: int  # its st_rdev, for the throttle
    direct_io: bool  # the loop device reads its backing file with O_DIRECT (the host page cache is not under it)


@contextlib.contextmanager
def loop_volume(where: str, nbytes: int) -> Iterator[Volume]:
    """A fresh ext4 filesystem of ``nbytes`` in an image file in ``where``, on a loop device with direct I/O where the kernel
    allows it, mounted in ``where``; unmounted, detached and deleted however the block ends."""
    image, mountpoint = os.path.join(where, "volume.img"), Path(where) / "mnt"
    with open(image, "wb") as handle:
        handle.truncate(nbytes)
    run_quietly("mkfs.ext4", "-q", "-F", image)
    loop = run_quietly("losetup", "--find", "--show", "--direct-io=on", image)
    mounted = False
    try:
        mountpoint.mkdir()
        run_quietly("mount", loop, str(mountpoint))
        mounted = True
        dio = Path(f"/sys/block/{os.path.basename(loop)}/loop/dio")
        yield Volume(mountpoint, loop, os.stat(loop).st_rdev, dio.exists() and dio.read_text().strip() == "1")
    finally:
        if mounted:
            subprocess.run(["umount", str(mountpoint)], check=False)
        subprocess.run(["losetup", "--detach", loop], check=False)
        os.unlink(image)


class Throttle(NamedTuple):
    """A blkio cgroup that limits reads from one device; ``wrap`` runs a command inside it."""

    group: Path
    stats: Path  # its I/O statistics file

    def wrap(self, command: Sequence[str]) -> list[str]:
        """``command`` started in the cgroup: a shell writes its own pid to cgroup.procs, then execs it."""
        return ["sh", "-c", f'echo $$ > {self.group / "cgroup.procs"} && exec "$@"', "sh", *command]

    def read(self, device: int) -> int:
        """Bytes the cgroup's processes have read from ``device`` so far."""
        return bytes_read(self.stats.read_text(), device)


@contextlib.contextmanager
def throttled(device: int, bytes_per_s: int) -> Iterator[Throttle]:
    """A new blkio cgroup reading ``device`` at most at ``bytes_per_s``: cgroup v1's blkio hierarchy where mounted,
    else v2's ``io.max`` (the io controller enabled in the root's subtree_control); removed when the block ends."""
    name = f"preflight-bench-founding-{os.getpid()}-{bytes_per_s}"
    if (V1 / "blkio.throttle.read_bps_device").exists():
        group, limit, stats, v2 = V1 / name, "blkio.throttle.read_bps_device", "blkio.throttle.io_service_bytes", False
    else:
        group, limit, stats, v2 = V2 / name, "io.max", "io.stat", True
        if "io" not in (V2 / "cgroup.subtree_control").read_text().split():
            (V2 / "cgroup.subtree_control").write_text("+io")
    group.mkdir()
    try:
        (group / limit).write_text(throttle_line(device, bytes_per_s, v2))
        yield Throttle(group, group / stats)
    finally:
        for _ in range(50):  # the last run's processes may still be leaving the group
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@contextlib.contextmanager
def busy(cores: int) -> Iterator[None]:
    """``cores`` processes spinning (``yes > /dev/null``) for the block's length; killed by pid when it ends.

    Each in a session of its own, as another job's process is: where the kernel groups the scheduler by session
    (``sched_autogroup_enabled``), spinners in the bench's session took their CPU from the bench's own plain loop
    while preflight's worker, which starts its own session, kept a whole group's share."""
    spinners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, start_new_session=True) for _ in range(cores)]
    try:
        time.sleep(0.5)  # let them take their cores before the run starts
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def drop_caches() -> None:
    """Write back, then drop the page cache, dentries and inodes: the next run's reads start cold."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def config(where: str, data: Path, duration: str, pools: int | None = None) -> str:
    """A thresholds file with one dataloader check over ``data``: batch 64, 2 workers, ``duration``, and
    ``worker_pools`` where ``pools`` is given (else the check's default)."""
    path = os.path.join(where, "founding.yaml")
    Path(path).write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{duration: {duration}, retries: 0}}
        checks:
          dataloader:
            path: {data}
            batch_size: 64
            num_workers: 2{f"{chr(10)}            worker_pools: {pools}" if pools else ""}
            throughput: {{min: 1 samples/s}}
        """))
    return path


class Measured(NamedTuple):
    """One run: the throughput row, what it read through the throttle, the load it ran under."""

    rate: float
    pools: tuple[float, ...]  # each fresh worker pool's samples/s (the row's ``samples``), whose mean is ``rate``
    stopped: str  # why the last pool's sampling stopped (the row's ``stopped``)
    note: str
    read_bytes: int
    load: float


def device_rate(throttle: Throttle, volume: Volume, nbytes: int) -> float:
    """Bytes/s the throttled device itself gives: ``dd iflag=direct bs=1M`` reading ``nbytes`` (the dataset's size)
    off the loop device in the cgroup, after a second idle: the reference for the same bytes over the same span,
    which a throttle's burst allowance (v1: up to a 100 ms slice ahead) lifts above its setting for a short span."""
    time.sleep(1.0)
    count = max(1, nbytes >> 20)
    done = subprocess.run(throttle.wrap(["dd", f"if={volume.loop}", "of=/dev/null", "bs=1M", f"count={count}",
                                         "iflag=direct"]), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench: dd off {volume.loop} failed: {done.stderr.strip()}")
    return (count << 20) / dd_seconds(done.stderr)


JOB_EPOCH = textwrap.dedent("""\
    import glob, sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Files(Dataset):  # the job's own reader: each sample one file, read whole, buffered
        def __init__(self, paths):
            self.paths = paths
        def __len__(self):
            return len(self.paths)
        def __getitem__(self, index):
            with open(self.paths[index], "rb") as handle:
                return torch.frombuffer(bytearray(handle.read()), dtype=torch.uint8).sum()

    paths = sorted(glob.glob(sys.argv[1] + "/*/*.JPEG"))
    loader = DataLoader(Files(paths), batch_size=64, num_workers=2, shuffle=True)
    began, first, samples, after_first = time.perf_counter(), None, 0, 0
    for batch in loader:
        samples += len(batch)
        if first is None:
            first = time.perf_counter()
        else:
            after_first += len(batch)
    end = time.perf_counter()
    print(after_first / (end - first), samples / (end - began))
""")


def job_epoch(throttle: Throttle, data: Path) -> tuple[float, float]:
    """A plain training job's first epoch over ``data`` in the throttled cgroup, the page cache dropped first: a
    DataLoader (batch 64, 2 workers, shuffled) over a Dataset that reads each file whole (buffered ``open().read()``).
    Returns (samples/s after its first batch, as the gate's windows after warm-up; samples/s over the whole epoch,
    its workers' start included)."""
    drop_caches()
    done = subprocess.run(throttle.wrap([sys.executable, "-c", JOB_EPOCH, str(data)]), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench: the job's epoch failed: {done.stderr[-500:]}")
    steady, whole = done.stdout.split()
    return float(steady), float(whole)


def measure(throttle: Throttle, volume: Volume, thresholds: str, where: str) -> Measured:
    """One ``preflight run`` in the throttled cgroup, the page cache dropped first."""
    drop_caches()
    report = os.path.join(where, "report.json")
    before = throttle.read(volume.device)
    done = subprocess.run(throttle.wrap([sys.executable, "-m", "preflight", "run", "-c", thresholds, "--json",
                                         report]), capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT, NO_COLOR="1"))
    load = os.getloadavg()[0]
    if not os.path.exists(report):
        raise SystemExit(f"bench: preflight run wrote no report (exit {done.returncode}): {done.stderr[-500:]}")
    with open(report) as handle:
        results = {r["id"]: r for r in json.load(handle)["results"]}
    os.unlink(report)
    row = results["dataloader.throughput"]
    if row["value"] is None:
        raise SystemExit(f"bench: the dataloader did not measure: {row['message']}")
    return Measured(row["value"], tuple(row.get("samples") or ()), row.get("stopped") or "", row.get("note") or "",
                    throttle.read(volume.device) - before, load)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="88,286", help="read throttles in MB/s, comma-separated")
    parser.add_argument("--runs", type=int, default=2, help="runs per rate and load")
    parser.add_argument("--duration", default="4s", help="the check's duration")
    parser.add_argument("--worker-pools", type=int, help="the check's worker_pools (default: its default, 8)")
    parser.add_argument("--per-class", type=int, default=PER_CLASS,
                        help=f"files in each of the {CLASSES} class folders (default {PER_CLASS}: 3,000 files)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the image file lives (default: /tmp)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/founding_table: needs root (loop device, mount, cgroup, drop_caches)", file=sys.stderr)
        return 2
    missing = [tool for tool in ("mkfs.ext4", "losetup", "mount", "yes") if not shutil.which(tool)]
    if missing:
        print(f"bench/founding_table: missing {', '.join(missing)}: apt-get install e2fsprogs util-linux",
              file=sys.stderr)
        return 2
    rates = [int(float(r) * 1e6) for r in args.rates.split(",")]
    rows = []
    load_before = os.getloadavg()
    with scratch_root(args.dir) as work, loop_volume(work, int(CLASSES * args.per_class * 113_000 * IMAGE_MARGIN) + (64 << 20)) as volume:
        data = imagenet(volume.mountpoint / "train", CLASSES, args.per_class)
        sizes = [f.stat().st_size for f in data.rglob("*.JPEG")]
        size = mean(sizes)
        thresholds = config(work, data, args.duration, args.worker_pools)
        for bandwidth in rates:
            with throttled(volume.device, bandwidth) as throttle:
                for load, cores in (("idle", 0), ("busy", os.cpu_count() or 2)):
                    with busy(cores):
                        device = device_rate(throttle, volume, sum(sizes)) / size  # in samples/s
                        for run in range(1, args.runs + 1):
                            got = measure(throttle, volume, thresholds, work)
                            job = job_epoch(throttle, data)
                            rows.append((bandwidth, load, run, got, device, job))
                            print(f"{bandwidth / 1e6:g} MB/s {load} run {run}: {got.rate:.0f} samples/s",
                                  file=sys.stderr)
    print(f"founding table: {len(sizes)} files of {min(sizes) / 1e3:.0f}-{max(sizes) / 1e3:.0f} kB "
          f"(mean {size / 1e3:.1f} kB) on ext4 on {volume.loop} (direct I/O on its backing file: "
          f"{'yes' if volume.direct_io else 'NO: the host page cache may serve it'}); dataloader batch 64, 2 workers, "
          f"duration {args.duration}, worker_pools {args.worker_pools or 'default'}; {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    print(f"{'throttle':>9} {'load':5} {'run':>3} {'samples/s':>10} {'expected':>9} {'ratio':>6}  {'10%':7} "
          f"{'read':>7} {'files':>6} {'dd':>6} {'vs dd':>6} {'job':>6} {'vs job':>6} {'epoch':>6} {'load avg':>8}")
    met = True
    for bandwidth, load, run, got, device, job in rows:
        expected = expected_rate(bandwidth, size)
        ok = within(got.rate, expected)
        met &= ok
        print(f"{bandwidth / 1e6:6g} MB/s {load:5} {run:3} {got.rate:10.0f} {expected:9.0f} {got.rate / expected:6.2f}  "
              f"{'within' if ok else 'OUTSIDE':7} {got.read_bytes / 1e6:5.0f}MB {got.read_bytes / size:6.0f} "
              f"{device:6.0f} {got.rate / device:6.2f} {job[0]:6.0f} {got.rate / job[0]:6.2f} {job[1]:6.0f} "
              f"{got.load:8.1f}")
    for bandwidth, load, run, got, *_ in rows:
        print(f"{bandwidth / 1e6:6g} MB/s {load} run {run}: pools {' '.join(f'{r:.0f}' for r in got.pools)}; "
              f"stopped: {got.stopped}; note: {got.note or '-'}")
    print(f"(expected = throttle / mean file size; 'read' is what the run's cgroup read from the loop device, "
          f"'files' that in mean files' worth; 'dd' the device's own rate over the dataset's bytes (dd iflag=direct "
          f"bs=1M in the cgroup, in mean files/s); 'job' a plain DataLoader's first epoch over the same files in "
          f"the cgroup (2 workers, batch 64, shuffled, each file read whole), samples/s after its first batch, and "
          f"'epoch' over its whole epoch, workers' start included; busy = {os.cpu_count()} x `yes > /dev/null`)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
