"""The pids limit (issue 33 case 2), built for real: a pids cgroup, the job's own loader and the gate inside it.

pytorch/pytorch#132145 and PaddlePaddle/PaddleSeg#1184: a container's pids limit (Docker/Podman
``--pids-limit``, Kubernetes ``podPidsLimit``) kills a DataLoader with "can't start new thread" or
"DataLoader worker exited unexpectedly". At ``pids.max`` 40 the job's loader (8 workers) runs two
epochs here (it peaked at 33 tasks), so the gate must pass and measure; at 24 the job fails, so the
gate must fail ``pids_headroom`` and say "pids limit 24 reached (FILE)". Before this change the gate
errored at 40 (its worker pools overlapped: 16 workers at once) and said only "DataLoader worker
exited unexpectedly" at 24.

The cgroup is made where this machine allows: cgroup v2, a sub-tree at the hierarchy's root with
``+pids`` in the root's ``cgroup.subtree_control`` (a cgroup with processes cannot enable controllers
for children, the no-internal-process rule); cgroup v1, a child of this process's own pids cgroup.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from preflight.host import cgroup
from tests.datasets import imagenet
from tests.helpers import REPO, _remove_cgroup, run_cli, write_config

JOB = """
import sys, torch
from pathlib import Path
from torch.utils.data import DataLoader, Dataset
files = sorted(str(p) for p in Path(sys.argv[1]).rglob("*.JPEG"))
class Files(Dataset):
    def __len__(self):
        return len(files)
    def __getitem__(self, i):
        with open(files[i], "rb") as f:
            return torch.frombuffer(bytearray(f.read(4096)), dtype=torch.uint8)
loader = DataLoader(Files(), batch_size=16, num_workers=8, pin_memory=True, shuffle=True)
for epoch in range(2):
    for batch in loader:
        (batch.float() * 2).sum()  # the training step: torch's intra-op threads start here
    print("epoch", epoch, "done", flush=True)
"""

CONFIG = """
version: 1
checks:
  dataloader:
    path: {data}
    num_workers: 8
    batch_size: 16
    worker_pools: 2
    duration: 2s
    throughput: {{min: 100 samples/s}}
    pids_headroom: {{min: 0 %}}
"""


@contextlib.contextmanager
def pids_limited_cgroup(limit: int) -> Iterator[tuple[Path, list[str]]]:
    """A new pids cgroup with ``pids.max`` = ``limit``: its directory and a prefix running a command in it.

    Skips with the reason where this machine cannot make one (not root, no pids controller, v2 with
    pids not enabled for the root's children). Removed afterwards, killing what is left in it.
    """
    enabled = None  # the subtree_control this test enabled pids in, to disable it again
    if cgroup.unified():
        root = cgroup.CGROUP_ROOT
        if "pids" not in (root / "cgroup.controllers").read_text().split():
            pytest.skip(f"the pids controller is not available in {root}/cgroup.controllers")
        if "pids" not in (root / "cgroup.subtree_control").read_text().split():
            try:
                (root / "cgroup.subtree_control").write_text("+pids")
            except OSError as error:
                pytest.skip(f"cannot enable +pids in {root}/cgroup.subtree_control ({error.strerror})")
            enabled = root / "cgroup.subtree_control"
        parent = root
    else:
        own = cgroup.directories("pids")
        if not own:
            pytest.skip("no cgroup v1 pids hierarchy is mounted under /sys/fs/cgroup")
        parent = own[0]
    directory = parent / f"preflight-pids-test-{os.getpid()}"
    try:
        directory.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a pids cgroup under {parent} ({error.strerror}): needs root")
    try:
        (directory / "pids.max").write_text(str(limit))
        yield directory, ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(directory)]
    finally:
        _remove_cgroup(directory)
        if enabled is not None:
            with contextlib.suppress(OSError):  # EBUSY: another child uses it by now; leave it on
                enabled.write_text("-pids")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 160 files of 80 kB: above the 100 files and 8 MiB under which the gate reads a scratch set instead
    return imagenet(tmp_path_factory.mktemp("pids") / "train", classes=4, per_class=40, size=80_000)


def run_job(prefix: list[str], data: Path, tmp_path: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    """The job's loader in the cgroup; returns once the cgroup is empty again (a failed job's orphaned workers
    poll for their parent and exit within seconds, and count against the limit until reaped)."""
    (tmp_path / "job.py").write_text(JOB)
    job = subprocess.run([*prefix, sys.executable, str(tmp_path / "job.py"), str(data)], capture_output=True,
                         text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60  # pids.current, not cgroup.procs: a task counts until it is reaped
    while (directory / "pids.current").read_text().strip() != "0" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (directory / "pids.current").read_text().strip() == "0", "the job's tasks outlived it by 60 s"
    return job


def gate(prefix: list[str], data: Path, tmp_path: Path) -> tuple[int, dict[str, dict], str]:
    config = write_config(tmp_path, CONFIG.format(data=data))
    report = tmp_path / "report.json"
    run = run_cli("run", "-c", str(config), "--json", str(report), cwd=tmp_path, prefix=prefix, timeout=240)
    results = {r["metric"]: r for r in json.loads(report.read_text())["results"]}
    return run.returncode, results, run.stdout + run.stderr


def test_at_pids_max_40_the_job_runs_two_epochs_and_the_gate_passes_and_measures(data, tmp_path):
    with pids_limited_cgroup(40) as (directory, prefix):
        job = run_job(prefix, data, tmp_path, directory)
        assert job.returncode == 0, job.stderr[-2000:]
        assert "epoch 1 done" in job.stdout
        code, results, output = gate(prefix, data, tmp_path)
    assert code == 0, output
    assert results["throughput"]["verdict"] == "pass"
    # Only the gate runs in the cgroup: its runner given back, the job's loader may hold all 40
    assert results["pids_available"]["value"] == 40.0
    assert f"tightest: pids.max 40 ({directory}/pids.max)" in results["pids_available"]["method"]
    headroom = results["pids_headroom"]
    assert headroom["verdict"] == "pass" and 0 < headroom["value"] < 100
    # the job's loader needs its 8 workers' tasks at least: 40 - 8 x 2 = 24 left at most
    assert headroom["value"] <= 100 * (40 - 16) / 40
    assert "8 workers x" in headroom["message"]


def test_at_pids_max_24_the_job_fails_and_the_gate_fails_naming_the_limit_and_the_fix(data, tmp_path):
    with pids_limited_cgroup(24) as (directory, prefix):
        job = run_job(prefix, data, tmp_path, directory)
        assert job.returncode != 0
        assert "can't start new thread" in job.stderr or "exited unexpectedly" in job.stderr
        code, results, output = gate(prefix, data, tmp_path)
    assert code == 1, output
    # the fact is reported whatever the loader did
    assert results["pids_available"]["value"] == 24.0, results["pids_available"]["method"]
    headroom = results["pids_headroom"]
    assert headroom["verdict"] == "fail"
    assert headroom["message"].startswith(f"could not measure: pids limit 24 reached ({directory}/pids.max): ")
    for fix in ("--pids-limit", "podPidsLimit", "or lower num_workers (8)"):
        assert fix in headroom["message"]
    assert results["throughput"]["verdict"] == "fail"
    assert "pids limit 24 reached" in results["throughput"]["message"]


# A check that starts threads or forks children until the kernel refuses one, then lets them all go.
HUNGRY = """
import os, threading
NAME = "hungry"
OPTIONS = ()
METRICS = ()

def measure(options, budget):
    release, started, children = threading.Event(), [], []
    try:
        for _ in range(200):
            if options["how"] == "threads":
                thread = threading.Thread(target=release.wait)
                thread.start()
                started.append(thread)
            else:
                pid = os.fork()
                if pid == 0:
                    release.wait(5)
                    os._exit(0)
                children.append(pid)
    finally:
        release.set()
        for pid in children:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    return []
"""
RUN_JOB = """
import json, sys
from preflight.worker import run_job
print(json.dumps(run_job({"module": "hungry", "options": {"how": sys.argv[1]}, "duration_s": 1, "timeout_s": 30})))
"""


@pytest.mark.parametrize("how, raised", [("threads", "can't start new thread"),
                                         ("fork", "BlockingIOError: [Errno 11] Resource temporarily unavailable")])
def test_any_check_refused_a_thread_or_a_fork_names_the_pids_limit(tmp_path, how, raised):
    # The worker's error boundary, for every check: before, only "RuntimeError: can't start new thread"
    (tmp_path / "hungry.py").write_text(HUNGRY)
    with pids_limited_cgroup(12) as (directory, prefix):
        run = subprocess.run([*prefix, sys.executable, "-c", RUN_JOB, how], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"})
    assert run.returncode == 0, run.stderr
    error = json.loads(run.stdout)["error"]
    assert error.startswith(f"pids limit 12 reached ({directory}/pids.max): a thread or process could not start (")
    assert raised.split(":")[-1].strip() in error and "--pids-limit" in error


STORAGE = """
version: 1
checks:
  storage:
    path: {data}
    duration: 2s
    rand_read: {{min: 1 IOPS}}
    small_files: {{min: 1 files/s}}
"""


def test_the_gates_own_io_pools_shrink_to_the_pids_limit_and_measure(data, tmp_path):
    # rand_read's 4 processes x 8 threads and small_files' 8 readers need 36 and 12 tasks beside the runner and
    # worker: at pids.max 16 rand_read was "could not measure: RuntimeError: can't start new thread"
    config = write_config(tmp_path, STORAGE.format(data=data))
    report = tmp_path / "report.json"
    with pids_limited_cgroup(16) as (directory, prefix):
        run = run_cli("run", "-c", str(config), "--json", str(report), cwd=tmp_path, prefix=prefix, timeout=240)
        refused = (directory / "pids.events").read_text()
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r["metric"]: r for r in json.loads(report.read_text())["results"]}
    assert results["rand_read"]["verdict"] == results["small_files"]["verdict"] == "pass"
    in_flight = int(results["rand_read"]["method"].split(" in flight")[0].rsplit("= ", 1)[1])
    assert 1 <= in_flight < 16
    assert refused.split() == ["max", "0"]  # no start was refused: the pools fit, not retried
