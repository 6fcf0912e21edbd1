"""/dev/shm full of other jobs' leftovers (issue 33 case 3), built for real: a 1 GiB tmpfs in a private mount
namespace holding 125 segments of 8 MiB (98% full), as sgl-project/sglang#28089, PaddlePaddle/Paddle#49632 and
mosaicml/streaming#781 report. 100 are ``torch_<pid>_...`` files of a process that has exited, 20 ``psm_`` files
mapped by a live process and 5 ``sem.`` files it holds open. The gate used to say ``size PASS``,
``allocatable FAIL`` and "start the container with --shm-size=8g"; now the row names what holds the space and
says to remove the stale segments. Needs root (``unshare -m``); skipped, saying why, elsewhere.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import in_mount_namespace, write_config

MiB = 1 << 20
# Leftovers of a DataLoader killed with SIGKILL: torch_<pid>_<random>_<n>, its creator gone.
LEFTOVERS = ("import os, subprocess, sys\n"
             "gone = subprocess.Popen(['true']); gone.wait()\n"
             "for n in range(100):\n"
             "    fd = os.open(os.path.join(sys.argv[1], f'torch_{gone.pid}_{1804289383 + n}_{n}'), "
             "os.O_CREAT | os.O_RDWR, 0o600)\n"
             "    os.posix_fallocate(fd, 0, 8 << 20); os.close(fd)\n"
             "print(gone.pid)\n")
# A running job's segments: 20 psm_ mapped (multiprocessing.shared_memory), 5 sem. held open; it waits to be killed.
HOLDER = ("import mmap, os, sys, time\n"
          "maps, fds = [], []\n"
          "for n in range(25):\n"
          "    name = f'psm_{n:08x}' if n < 20 else f'sem.mp-{n:04x}'\n"
          "    fd = os.open(os.path.join(sys.argv[1], name), os.O_CREAT | os.O_RDWR, 0o600)\n"
          "    os.posix_fallocate(fd, 0, 8 << 20)\n"
          "    if n < 20:\n"
          "        maps.append(mmap.mmap(fd, 8 << 20)); os.close(fd)\n"
          "    else:\n"
          "        fds.append(fd)\n"
          "open(sys.argv[2], 'w').write(str(os.getpid()))\n"
          "time.sleep(300)\n")


@pytest.fixture(scope="module")
def leftovers(tmp_path_factory) -> tuple[Path, dict[str, dict], int, int]:
    root = tmp_path_factory.mktemp("shm")
    shm, ready = root / "shm", root / "holder.pid"
    shm.mkdir()
    (root / "leftovers.py").write_text(LEFTOVERS)
    (root / "holder.py").write_text(HOLDER)
    config = write_config(root, f"""
        version: 1
        checks:
          shm:
            path: {shm}
            allocate: 1 GiB
            size: {{min: 1 GiB}}
            allocatable: {{min: 1 GiB}}
          big:
            check: shm
            path: {shm}
            allocate: 1 GiB
            size: {{min: 64 GiB}}
        """)
    done = in_mount_namespace(
        f"set -e; mount -t tmpfs -o size=1g tmpfs {shm}; {sys.executable} {root / 'leftovers.py'} {shm} "
        f"> {root / 'gone.pid'}; {sys.executable} {root / 'holder.py'} {shm} {ready} & holder=$!; "
        f"while [ ! -s {ready} ]; do sleep 0.1; done; "
        f"NO_COLOR=1 {sys.executable} -m preflight run -c {config} --json - || true; kill $holder")
    assert done.stdout, done.stderr
    results = {r["id"]: r for r in json.loads(done.stdout)["results"]}
    return shm, results, int((root / "gone.pid").read_text()), int(ready.read_text())


def test_a_full_shm_of_the_right_size_names_the_leftovers_and_says_to_remove_the_stale_ones(leftovers):
    shm, results, gone, holder = leftovers
    assert results["shm.size"]["verdict"] == "pass" and results["shm.size"]["value"] == 1.0
    allocatable = results["shm.allocatable"]
    assert allocatable["verdict"] == "fail"
    assert allocatable["value"] == pytest.approx(16 / 1024)  # 24 MiB free: 1 GiB halved until it fits
    assert allocatable["message"].startswith(
        f"measured 16 MiB, required >= 1 GiB (only 16 MiB of 1 GiB could be reserved); 125 files left in {shm} "
        f"hold 1000 MiB (98% of 1 GiB): largest torch_{gone}_1804289383_0 (8 MiB, creator pid {gone} not running), ")
    assert (f"; 100 (800 MiB) mapped or open in no process visible here, 100 of them torch_ segments whose creator "
            f"is gone; 25 (200 MiB) in use by pid {holder}") in allocatable["message"]
    assert allocatable["hint"].startswith(
        f"remove the stale segments left in {shm} by earlier jobs (100, 800 MiB, held by no process here; e.g. "
        f"`rm {shm}/torch_{gone}_*` once no job runs)")
    assert "--shm-size" not in allocatable["hint"]  # the size is not what is short


def test_free_shm_is_reported_with_what_holds_it(leftovers):
    shm, results, gone, holder = leftovers
    free = results["shm.free"]
    assert free["verdict"] == "info" and free["value"] == pytest.approx(24 / 1024)
    assert f"125 files left in {shm} hold 1000 MiB (98% of 1 GiB)" in free["message"]


def test_the_size_fix_is_the_thresholds_size_not_always_8g(leftovers):
    shm, results, _, _ = leftovers
    size = results["big.size"]
    assert size["verdict"] == "fail"
    assert size["hint"] == (f"{shm} has 1 GiB, >= 64 GiB is needed: start the container with --shm-size=64g, or in "
                            f"Kubernetes mount an emptyDir with medium: Memory and sizeLimit: 64Gi at {shm}")


# Three public reports of the same kind, each a tmpfs of its own in one namespace (sizes scaled to the test VM):
# - ofiwg/libfabric#7800: /dev/shm filled by psm3_shm.<uid>.<...> files of killed or crashed MPI jobs;
# - pytorch/pytorch#1355: `shm 1.0G 883M 142M 87% /dev/shm` in a container "with two zombie workers" that still
#   map it: the space is in use, not stale, and removing files is not the fix;
# - spdk/spdk#2483: 130 MB `(null)_trace.pid<N>` trace files of exited processes in /dev/shm.
REPORTS = ("import mmap, os, sys, time\n"
           "libfabric, zombies, spdk, ready = sys.argv[1:5]\n"
           "def make(path, size):\n"
           "    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600); os.posix_fallocate(fd, 0, size); return fd\n"
           "for n in range(30):\n"
           "    os.close(make(os.path.join(libfabric, f'psm3_shm.996.0x8003b41{n:02x}:fe80000000000000:"
           "98039b03000c56de.0'), 8 << 20))\n"
           "for pid in (1533173, 1449517, 1152422):\n"
           "    os.close(make(os.path.join(spdk, f'(null)_trace.pid{pid}'), 130 << 20))\n"
           "workers = []\n"
           "for n in range(2):\n"
           "    child = os.fork()\n"
           "    if child == 0:\n"
           "        fd = make(os.path.join(zombies, f'torch_{os.getpid()}_{n}_0'), 110 << 20)\n"
           "        held = mmap.mmap(fd, 110 << 20)\n"
           "        open(os.path.join(ready, str(n)), 'w').close()\n"
           "        time.sleep(300); os._exit(0)\n"
           "    workers.append(child)\n"
           "print(' '.join(map(str, workers)))\n")


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[Path, dict[str, dict], list[int]]:
    root = tmp_path_factory.mktemp("reports")
    places = {name: root / name for name in ("libfabric", "zombies", "spdk")}
    ready = root / "ready"
    for place in (*places.values(), ready):
        place.mkdir()
    (root / "reports.py").write_text(REPORTS)
    sizes = {"libfabric": 256, "zombies": 256, "spdk": 512}
    config = write_config(root, "version: 1\nchecks:\n" + "".join(
        f"  {name}:\n    check: shm\n    path: {places[name]}\n    allocate: {sizes[name]} MiB\n"
        f"    size: {{min: {sizes[name]} MiB}}\n    allocatable: {{min: {sizes[name]} MiB}}\n" for name in places))
    mounts = "; ".join(f"mount -t tmpfs -o size={sizes[name]}m tmpfs {places[name]}" for name in places)
    done = in_mount_namespace(
        f"set -e; {mounts}; {sys.executable} {root / 'reports.py'} {' '.join(map(str, places.values()))} {ready} "
        f"> {root / 'workers'}; while [ ! -e {ready / '1'} ] || [ ! -e {ready / '0'} ]; do sleep 0.1; done; "
        f"NO_COLOR=1 {sys.executable} -m preflight run -c {config} --json - || true; kill $(cat {root / 'workers'})")
    assert done.stdout, done.stderr
    return root, {r["id"]: r for r in json.loads(done.stdout)["results"]}, \
        [int(p) for p in (root / "workers").read_text().split()]


def test_libfabric_psm3_leftovers_are_named_by_their_family(reported):
    root, results, _ = reported
    row = results["libfabric.allocatable"]
    assert results["libfabric.size"]["verdict"] == "pass" and row["verdict"] == "fail"
    assert f"30 files left in {root / 'libfabric'} hold 240 MiB (94% of 256 MiB): largest psm3_shm.996.0x8003b4100:" \
           in row["message"]
    assert "30 (240 MiB) mapped or open in no process visible here" in row["message"]
    assert f"e.g. `rm {root / 'libfabric'}/psm3_*` once no job runs" in row["hint"]


def test_zombie_workers_that_still_map_shm_are_named_and_not_called_stale(reported):
    root, results, workers = reported
    row = results["zombies.allocatable"]
    assert results["zombies.size"]["verdict"] == "pass" and row["verdict"] == "fail"
    assert f"2 files left in {root / 'zombies'} hold 220 MiB (86% of 256 MiB)" in row["message"]
    assert f"2 (220 MiB) in use by pid {min(workers)}, {max(workers)}" in row["message"]
    assert "mapped or open in no process" not in row["message"]
    assert row["hint"].startswith(f"{root / 'zombies'} is the right size but running processes hold its space")


def test_spdk_trace_files_of_exited_processes_are_stale_and_the_fix_quotes_their_odd_names(reported):
    root, results, _ = reported
    row = results["spdk.allocatable"]
    assert row["verdict"] == "fail"
    assert f"3 files left in {root / 'spdk'} hold 390 MiB (76% of 512 MiB): largest (null)_trace.pid1152422 " \
           f"(130 MiB, held by no process here)" in row["message"]
    assert f"e.g. `rm '{root / 'spdk'}/(null)_'* once no job runs`" not in row["hint"]
    assert f"e.g. `rm '{root / 'spdk'}/(null)_'*` once no job runs" in row["hint"]


def test_a_shm_out_of_inodes_says_so_rather_than_halving_to_nothing(tmp_path):
    """tmpfs counts inodes too (``nr_inodes``; neondatabase/neon#9738 piled up tens of thousands of tiny
    PostgreSQL.* segments): with none left, not one segment can be made, whatever its size."""
    shm = tmp_path / "shm"
    shm.mkdir()
    config = write_config(tmp_path, f"version: 1\nchecks:\n  shm:\n    path: {shm}\n    allocate: 16 MiB\n"
                                    f"    allocatable: {{min: 16 MiB}}\n")
    fill = f"i=0; while touch {shm}/PostgreSQL.$i 2>/dev/null; do i=$((i+1)); done"
    done = in_mount_namespace(f"mount -t tmpfs -o size=64m,nr_inodes=64 tmpfs {shm} && {fill}; "
                              f"NO_COLOR=1 {sys.executable} -m preflight run -c {config} --json -")
    row = {r["id"]: r for r in json.loads(done.stdout)["results"]}["shm.allocatable"]
    assert row["verdict"] == "fail" and row["value"] == 0, row
    assert row["message"].startswith(f"measured 0 GiB, required >= 16 MiB (no inodes left in {shm} (0 of 64 inodes "
                                     f"free; 64 MiB of 64 MiB free, so bytes are not what ran out): every new file "
                                     f"fails, whatever its size)"), row["message"]
