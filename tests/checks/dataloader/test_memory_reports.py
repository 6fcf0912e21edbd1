"""Public reports of memory verdicts gone wrong on how Linux and containers report memory, built here for real.

Each test names the report, builds its case at small scale (real nested memory cgroups, a real
bind mount of a cgroup as a container runtime does, real forked DataLoader workers) and asserts
what the gate compares: the limit ``memory.limit`` returns inside the case, or the loader's PSS.
None waits for anything, so a busy machine cannot fail them.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from preflight.loading.footprint import memory
from preflight.host import cgroup, hostmem
from tests.helpers import (REPO, in_mount_namespace, job_package, memory_cgroup_pair, memory_limited_cgroup, run_cli,
                           write_config)

MiB = 2**20

# What the gate compares the projected epoch with, and its verdict for a loader projected to hold ``projected``
# bytes, from inside the cgroup under test.
LIMIT_INSIDE = """
import json, sys
from preflight.loading.footprint import memory
from preflight.host import hostmem
projected = int(sys.argv[1]) if len(sys.argv) > 1 else 0
the_limit = memory.limit(0)
print(json.dumps({"bytes": the_limit.bytes, "what": the_limit.what, "available": hostmem.mem_available(),
                  "headroom": 100.0 * (the_limit.bytes - projected) / the_limit.bytes}))
"""


def limit_inside(prefix: list[str], *args: str) -> dict:
    run = subprocess.run([*prefix, sys.executable, "-c", LIMIT_INSIDE, *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_a_limit_on_the_parent_cgroup_binds_a_child_whose_own_limit_reads_unlimited():
    # KimMachineGun/automemlimit#31, awslabs/mountpoint-s3#1933: the process's own memory.max reads "max" (v1:
    # 9223372036854771712) under a Kubernetes pod's or a systemd slice's limit; reading it alone finds no limit.
    # Already handled (cgroup.directories walks every ancestor): this guards it on a real hierarchy.
    with memory_cgroup_pair(300 * MiB) as (_, child, prefix):
        own = "memory.max" if cgroup.unified() else "memory.limit_in_bytes"
        assert not (child / own).read_text().strip().isdigit() or int((child / own).read_text()) > 2**60
        seen = limit_inside(prefix)
    assert (seen["bytes"], seen["what"]) == (300 * MiB, "the cgroup memory limit")


def test_a_parent_limit_a_container_cannot_see_is_read_from_hierarchical_memory_limit():
    # cloudfoundry/gosigar#56, VictoriaMetrics/VictoriaMetrics#699: on cgroup v1 a runtime bind-mounts the
    # container's own cgroup at /sys/fs/cgroup/memory, so the ancestors holding the limit are not in the tree;
    # /proc/self/cgroup still names the full path. Only memory.stat's hierarchical_memory_limit says it.
    if cgroup.unified():
        pytest.skip("cgroup v2 has no hierarchical_memory_limit; a v2 container's ancestors are out of its namespace")
    with memory_cgroup_pair(300 * MiB) as (_, child, _prefix):
        mount = cgroup.directories("memory")[-1]  # the v1 memory hierarchy's root, where runtimes mount
        run = in_mount_namespace(
            f'mount --bind "{child}" "{mount}" && echo $$ > "{mount}/cgroup.procs" && '
            f'exec "{sys.executable}" -c \'{LIMIT_INSIDE}\'', timeout=60)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert (seen["bytes"], seen["what"]) == (300 * MiB, "the cgroup memory limit")


def test_a_cgroup_limit_above_what_the_host_has_left_is_not_the_limit():
    # Traitome/oxo-flow#96 (a 9.7G cgroup on a 3.7G box OOM-killed all the same), sqliteai/warp#14 ("min(physical,
    # cgroup limit)"): a limit the node cannot back binds nothing; the host runs out first.
    above = (hostmem.mem_available() or 2**40) * 4
    with memory_limited_cgroup(above) as (_, prefix):
        projected = above // 2  # twice what the host has: an OOM waiting to happen, 50% headroom by the cgroup
        seen = limit_inside(prefix, str(projected))
    assert seen["bytes"] < above and seen["headroom"] < 0, seen
    assert seen["what"] == ("the host's available memory and what the loader holds; below the cgroup memory limit "
                            f"of {memory.cgroup_memory.readable(above)}")


class Shared(torch.utils.data.Dataset):
    # A Dataset holding one large array written before the fork: every worker maps the same pages.
    def __init__(self, size: int) -> None:
        self.array = np.ones(size, dtype=np.uint8)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        return int(self.array[index * 4096])


def rss(pid: int) -> int:
    text = open(f"/proc/{pid}/smaps_rollup").read()
    return int(re.search(r"^Rss:\s+(\d+) kB", text, re.M)[1]) * 1024


def test_pages_forked_workers_share_are_counted_once_not_once_per_worker():
    # rwth-i6/returnn#1443 (a worker at rss=4.7GB, pss=2.0GB, shared=4.5GB), dask/distributed#4304: RSS counts
    # every shared page in every process, so summing it over forked workers reports the Dataset N times. Already
    # handled (the peak is the sum of PSS): this guards it with real forked DataLoader workers.
    size = 256 * MiB
    loader = torch.utils.data.DataLoader(Shared(size), num_workers=2, batch_size=4,
                                         multiprocessing_context="fork")
    iterator = iter(loader)
    next(iterator)
    try:
        reading = memory.read(iterator, 4, os.getpid())
        pids = [os.getpid()] + [w.pid for w in iterator._workers]
        rss_sum = sum(rss(pid) for pid in pids)
        main_rss = rss(os.getpid())
    finally:
        iterator._shutdown_workers()
    assert reading is not None and len(reading.workers) == 2
    assert rss_sum >= main_rss + 2 * size  # what an RSS sum would report: the array in every worker again
    assert reading.pss < main_rss + size / 2  # what the gate reports: the array once, the workers' own pages


CACHING = """
import mmap
import os
import time

import torch

N = 50_000


class ShmCache(torch.utils.data.Dataset):
    # Decoded samples cached on /dev/shm for the next epoch: each read leaves 32 KiB on a tmpfs.
    def __len__(self):
        return N

    def __getitem__(self, index):
        time.sleep(0.001)  # at most 1,000 samples/s per worker: the windows write a bounded share
        with open(os.path.join(os.environ["SHM_CACHE"], str(index)), "wb") as cache:
            cache.write(b"x" * 32768)
        return index


class MappedShmCache(ShmCache):
    # The same cache filled through a mapping the worker drops again: no write() counts it, no PSS holds it.
    def __getitem__(self, index):
        time.sleep(0.001)
        with open(os.path.join(os.environ["SHM_CACHE"], str(index)), "w+b") as cache:
            cache.truncate(32768)
            with mmap.mmap(cache.fileno(), 32768) as mapped:
                mapped[:] = b"x" * 32768
        return index
"""


@pytest.mark.parametrize("dataset", ["ShmCache", "MappedShmCache"])
def test_files_a_dataset_leaves_on_tmpfs_count_against_the_limit_though_no_process_maps_them(tmp_path, dataset):
    # moby/moby#47967, kubernetes/website#36494, argonne-lcf/dlio_benchmark#165: tmpfs pages (/dev/shm, a
    # memory-backed emptyDir) are charged to the writer's cgroup and OOM-kill it; no process's PSS holds them. In
    # the loader's own cgroup (a container's, a Slurm step's) every such file is the job's, and one filled through
    # a mapping, which no write() counts, is counted whole (capped by the loader's writes, it read 0).
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    cache = shm / f"preflight-test-{os.getpid()}"
    cache.mkdir()
    src = job_package(tmp_path / "src", "caching", {"__init__": CACHING})
    config = write_config(tmp_path, f"""
        version: 1
        checks:
          dataloader:
            dataset: "caching:{dataset}"
            python_path: [{src}]
            num_workers: 2
            worker_pools: 1
            duration: 0.5s
            timeout: 90s
            memory_headroom: {{min: 0 %}}
        """)
    counter = "memory.events" if cgroup.unified() else "memory.oom_control"
    try:
        with memory_limited_cgroup(LIMIT) as (directory, prefix):
            run = run_cli("run", "-c", str(config), "--format", "json", prefix=prefix, cwd=tmp_path, timeout=180,
                          env={"SHM_CACHE": str(cache)})
            kills = int(re.search(r"^oom_kill (\d+)$", (directory / counter).read_text(), re.M)[1])
        written = sum(f.stat().st_size for f in cache.iterdir())
    finally:
        shutil.rmtree(cache)
    assert kills == 0, "the kernel OOM-killed during the windows: the case was not built"
    results = {r["id"]: r for r in json.loads(run.stdout)["results"]}
    headroom, peak = results["dataloader.memory_headroom"], results["dataloader.memory_peak"]
    assert headroom["verdict"] == "fail" and run.returncode == 1, headroom
    files = re.search(r"; ([\d.]+) MiB of it files on tmpfs, \+([\d.]+) KiB per sample\)", headroom["message"])
    assert files, headroom["message"]
    assert 0 < float(files[1]) * MiB <= written  # what the windows wrote, less what workers had just begun
    # 32 KiB a sample, page-rounded; the workers write ahead of the samples delivered (their prefetch), more so on a
    # busy machine (36.9 seen with three test processes on two cores), so 1.5x, far from the 0 of not counting them
    assert 28 <= float(files[2]) <= 48
    assert peak["value"] >= float(files[1]) * MiB
    assert "files on tmpfs" in headroom["hint"] and "cache on disk" in headroom["hint"]


def test_tmpfs_files_another_program_of_the_cgroup_writes_meanwhile_are_not_the_loader_s(tmp_path):
    # A clean-clone CI run of this suite: another test filled /dev/shm while a loader's memory was read, and the
    # cgroup's shmem growth, taken whole as the loader's files and projected per sample, put an epoch that peaked at
    # 312 MiB at 3,353 MiB. A CI runner's other jobs, or a bare node's root cgroup, do the same to a real gate
    # (herdrdev/herdr#2178: a CUDA benchmark's 9.9 GB of shmem in a server's cgroup).
    shm = Path("/dev/shm")
    if not shm.is_dir() or memory.cgroup_memory.shmem() is None:
        pytest.skip("no /dev/shm, or no memory cgroup counter of its files here")
    other = shm / f"preflight-test-other-{os.getpid()}"
    done = tmp_path / "done"
    loader = torch.utils.data.DataLoader(list(range(4096)), num_workers=2, batch_size=64,
                                         multiprocessing_context="fork")
    watch = memory.Watch()
    puller = watch.puller(loader, lambda batch: (len(batch), 0))
    try:
        for _ in range(8):
            puller._next()
        before = memory.cgroup_memory.shmem()
        # Another program, no child of the loader's: the shell exits at once and init adopts the writer.
        subprocess.run(["sh", "-c", f'(dd if=/dev/zero of="{other}" bs=1M count=200 status=none; touch "{done}") &'],
                       check=True, timeout=30)
        for _ in range(600):
            if done.exists():
                break
            time.sleep(0.05)
        grown = memory.cgroup_memory.shmem() - before
        for _ in range(8):
            puller._next()
        reading = puller._read()
    finally:
        puller.close()
        other.unlink(missing_ok=True)
    assert done.exists() and grown >= 190 * MiB, "the other program's file was not charged here: no case was built"
    assert puller.shared  # the writer is in this cgroup and no process of the loader's lineage
    assert reading.tmpfs < 4 * MiB, reading.tmpfs / MiB  # the batches' pickles through the pipes at most


LIMIT = 1024 * MiB  # above what the windows hold (the loader and a few thousand samples' files), below an epoch's 1.5 GiB


# Public reports of the copy-on-write growth itself, each Dataset's layout built as reported: the projection fitted
# on windows that read a fixed number of samples (so a busy machine reads the same) against the real epoch's peak.
LAYOUTS = """
import pickle

import numpy as np
import torch

N = 120_000


class Scans(torch.utils.data.Dataset):
    # referit3d/referit3d#5: a big dict of scan objects shared by every worker, read by key (40 GB at 8 workers).
    class Scan:
        def __init__(self, i):
            self.scan_id, self.label, self.points = f"scene{i:06d}", i % 607, (float(i), float(i) / 2)

    def __init__(self):
        self.scans = {f"scene{i:06d}": self.Scan(i) for i in range(N)}
        self.keys = np.array(list(self.scans))

    def __len__(self):
        return N

    def __getitem__(self, index):
        scan = self.scans[str(self.keys[index])]
        return scan.label, scan.scan_id


class Coco(torch.utils.data.Dataset):
    # lyuwenyu/RT-DETR#418 (#93, #172, #207): a COCO index, each image's annotations a list of dicts.
    def __init__(self):
        self.images = [{"id": i, "file_name": f"{i:012d}.jpg", "height": 480, "width": 640} for i in range(N)]
        self.annotations = {i: [{"bbox": [1.0, 2.0, 30.0, 40.0], "category_id": i % 80}] for i in range(N)}

    def __len__(self):
        return N

    def __getitem__(self, index):
        image = self.images[index]
        return image["id"], image["file_name"], len(self.annotations[image["id"]])


class Serialized(torch.utils.data.Dataset):
    # tier4/autoware-ml#78's fix (detectron2's NumpySerializedList): the same COCO records pickled into one numpy
    # buffer with their offsets, so a worker's read writes no reference count of the main process's pages.
    def __init__(self):
        records = [pickle.dumps({"id": i, "file_name": f"{i:012d}.jpg", "height": 480, "width": 640})
                   for i in range(N)]
        self.offsets = np.cumsum([len(r) for r in records])
        self.buffer = np.frombuffer(b"".join(records), dtype=np.uint8)

    def __len__(self):
        return N

    def __getitem__(self, index):
        start = 0 if index == 0 else int(self.offsets[index - 1])
        image = pickle.loads(self.buffer[start:int(self.offsets[index])].tobytes())
        return image["id"], image["file_name"]
"""


def epoch_in_this_process(tmp_path, name: str) -> tuple[memory.Projection, int, int]:
    """The projection from 4 readings taken every 4,096 samples of a fresh 2-worker pool over ``name`` (batch 64,
    shuffled), as ``memory.Watched`` reads them; the real epoch's peak of anonymous PSS (read every 16 batches
    after); and the file-backed part of the PSS at the projection's peak reading.

    PSS divides a shared library's pages among every process that maps them, so on a CI machine the other tests'
    torch processes, coming and going, moved the loader's PSS by tens of MiB between the readings and the epoch
    (376 MiB at the readings, 325 MiB over the epoch, which grows). The model projects the anonymous part: the
    comparison takes that part on both sides."""
    src = job_package(tmp_path / "src", "layouts", {"__init__": LAYOUTS})
    sys.path.insert(0, str(src))
    try:
        import layouts

        before = memory.rollup(os.getpid())
        dataset = getattr(layouts, name)()
        footprint = memory.rollup(os.getpid()).anonymous - before.anonymous
        loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2,
                                             multiprocessing_context="fork")
        watch = memory.Watch()
        puller = watch.puller(loader, lambda batch: (len(batch[0]), 0))
        try:
            for _ in range(4):
                for _ in range(64):
                    puller._next()
                puller.readings.append(puller._read())
            projection = memory.project(watch.pools, len(dataset), footprint)
            at_peak = max(puller.readings, key=lambda reading: reading.held)
            shared = at_peak.pss - at_peak.anon
            real = 0
            while puller.delivered < len(dataset):
                puller._next()
                if puller.batches % 16 == 0:
                    pids = [os.getpid()] + [p.pid for p in puller.iterator._workers]
                    real = max(real, sum(memory.rollup(pid).pss_anon for pid in pids))
        finally:
            puller.close()
    finally:
        sys.path.remove(str(src))
        sys.modules.pop("layouts", None)
    return projection, real, shared


EPOCH_IN_A_FRESH_INTERPRETER = """
import pickle, sys
from pathlib import Path
from tests.checks.dataloader.test_memory_reports import epoch_in_this_process
sys.stdout.buffer.write(pickle.dumps(epoch_in_this_process(Path(sys.argv[1]), sys.argv[2])))
"""


def epoch_against_projection(tmp_path, name: str) -> tuple[memory.Projection, int, int]:
    """``epoch_in_this_process`` run in a fresh interpreter. A pytest-xdist worker holds what its earlier tests left,
    and a forked loader worker's garbage collector writes to every such object's page: on a CI run that put 134 MiB of
    copies into a Dataset that copies nothing, and an earlier run's first reading at 1.4 GiB. The job's process holds
    only what the job built."""
    done = subprocess.run([sys.executable, "-c", EPOCH_IN_A_FRESH_INTERPRETER, str(tmp_path), name], cwd=REPO,
                          capture_output=True, timeout=240)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return pickle.loads(done.stdout)


@pytest.mark.parametrize("name", ["Scans", "Coco"])
def test_a_dataset_of_python_objects_is_projected_within_20_percent_of_its_real_epoch(tmp_path, name):
    # Each worker copies the pages of the objects it reads until it holds them all: a straight line at the windows'
    # rate, capped at every worker copying the main process, was 22-75 % above a real epoch. (The scans' reads touch
    # nearly all that building them took, so their fit lands at that bound; the COCO index's leave its lists alone.)
    projection, real, shared = epoch_against_projection(tmp_path, name)
    assert projection.cow is not None and projection.workers_grew, projection
    projected = projection.projected - shared
    assert abs(projected - real) <= 0.20 * real, (projected / MiB, real / MiB)


def test_records_serialized_into_one_numpy_buffer_grow_nothing_and_are_not_blamed(tmp_path):
    # In a fresh interpreter the workers' allocator arenas grow 17-19 MiB over the first 16,384 samples (5.8-6.6 % of
    # the peak), drawn on as a straight line; the real epoch adds 2 MiB: 1.09x its anonymous peak. Below the blamed
    # share, and within 15 %.
    projection, real, shared = epoch_against_projection(tmp_path, "Serialized")
    assert projection.added < memory.BLAMED_GROWTH * projection.peak, projection
    projected = projection.projected - shared
    assert abs(projected - real) <= 0.15 * real, (projected / MiB, real / MiB)
    _, headroom = memory.measurements(projection, 2, 2, "m", memory.Limit(real * 4, "the cgroup memory limit"))
    assert "copy-on-write" not in headroom.hint
