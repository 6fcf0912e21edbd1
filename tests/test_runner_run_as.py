"""Issue 42: the gate measures as the job runs, its user, groups and per-user limits, not as root.

Each case is built for real: a dataset the job's user cannot read, a /dev/shm of mode 0755 in a private mount
namespace, a user that already runs 40 tasks under `prlimit --nproc=60`. The gate runs as root (as a Slurm prolog
does), from a copy of this checkout that user ``nobody`` may read (``tests.nobody``), and names the job with
``defaults.run_as`` or ``SLURM_JOB_UID``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import nobody
from tests.helpers import write_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="switching to the job's user needs root and setpriv")
GROUP = 4242  # a group user nobody is not in, by number (no entry needed)


def gate(work: Path, child: nobody.Child, config: str, prefix: tuple[str, ...] = (),
         env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """``preflight run`` as root from ``child``'s readable copy; (exit code, results by id, output)."""
    path = write_config(work, config)
    report = work / "report.json"
    report.unlink(missing_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PREFLIGHT_", "GITHUB_"))}
    run = subprocess.run([*prefix, child.python, "-m", "preflight", "run", "-c", str(path), "--json", str(report)],
                         cwd=work, capture_output=True, text=True, timeout=240,
                         env={**environ, "PYTHONPATH": child.pythonpath, "NO_COLOR": "1", "PREFLIGHT_LOCK": "off",
                              **(env or {})})
    output = run.stdout + run.stderr
    results = {r["id"]: r for r in json.loads(report.read_text())["results"]} if report.exists() else {}
    return run.returncode, results, output


@pytest.fixture(scope="module")
def child():
    with nobody.child("torch", "numpy", "yaml") as found:
        yield found


@pytest.fixture
def work():
    """A folder the job's user may enter and read (pytest's own are 0700 on the way), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="preflight-run-as-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _dataset(root: Path, files: int = 150) -> Path:
    """An ImageNet-shaped folder of ``files`` 10 kB files, mode 0640, group ``GROUP``: root's and the group's."""
    for index in range(files):
        folder = root / f"n{index % 5:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index:05d}.JPEG").write_bytes(os.urandom(10_000))
    for path in [root, *root.rglob("*")]:
        os.chown(path, 0, GROUP)
        os.chmod(path, 0o755 if path.is_dir() else 0o640)
    return root


def test_rocm_spur_364_files_the_jobs_user_cannot_read_fail_as_the_job_not_as_root(work, child):
    data = _dataset(work / "data")
    checks = f"""
      storage:
        path: {data}
        duration: 0.5s
        unreadable_files: {{max: 0}}
      dataloader:
        path: {data}
        duration: 0.5s
        num_workers: 1
        throughput: {{min: 1 samples/s}}
    """
    # root reads every file: it passes, and says it measured as root
    code, results, output = gate(work, child, f"version: 1\nchecks:{checks}")
    assert code == 0, output
    assert results["storage.unreadable_files"]["value"] == 0
    assert "measured as root: not the job's view" in results["storage.unreadable_files"]["note"]
    assert "preflight: measured as root: not the job's view" in output
    # as the job, user nobody, not in the files' group: every file is refused, as the job's worker 0 is
    for job in ({"config": "defaults: {run_as: nobody}\n", "env": {}},
                {"config": "", "env": {"SLURM_JOB_UID": "65534", "SLURM_JOB_GID": "65534"}}):
        code, results, output = gate(work, child, f"version: 1\n{job['config']}checks:{checks}", env=job["env"])
        assert code == 1, output
        unreadable = results["storage.unreadable_files"]
        assert (unreadable["verdict"], unreadable["value"]) == ("fail", 150), unreadable
        assert "PermissionError" in unreadable["message"] and "measured as root" not in unreadable["note"]
        assert results["dataloader.throughput"]["verdict"] == "fail", results["dataloader.throughput"]
    # the same user with the files' group as its own reads them
    code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: 'nobody:{GROUP}'}}\nchecks:{checks}")
    assert code == 0, output
    assert results["storage.unreadable_files"]["value"] == 0


SHM = ("unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=256m,mode=0755 tmpfs /dev/shm && exec "$@"', "sh")


def test_smartos_live_689_a_dev_shm_the_job_cannot_write_fails_by_its_mode_and_its_loader_says_why(work, child):
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no private mount namespace here (unshare -m refused)")
    data = work / "data"
    for index in range(120):
        data.mkdir(exist_ok=True)
        (data / f"{index:04d}.jpg").write_bytes(os.urandom(5_000))
    checks = f"""
      shm:
        allocate: 16 MiB
        world_writable: {{min: 1}}
        allocatable: {{min: 16 MiB}}
      dataloader:
        path: {data}
        duration: 0.5s
        num_workers: 2
        throughput: {{min: 1 samples/s}}
    """
    # as root: a fact of the mount, whoever reads: the mode fails, named with its fix
    code, results, output = gate(work, child, f"version: 1\nchecks:{checks}", prefix=SHM)
    assert code == 1, output
    mode = results["shm.world_writable"]
    assert (mode["verdict"], mode["value"]) == ("fail", 0.0), mode
    assert "/dev/shm is mode 0755, not 1777" in mode["message"] and "chmod 1777 /dev/shm" in mode["hint"]
    assert results["shm.allocatable"]["verdict"] == "pass"  # root writes through the mode
    assert results["dataloader.throughput"]["verdict"] == "pass"
    # as the job: no segment, no semaphore: both rows name the mount, its mode and the fix
    code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: nobody}}\nchecks:{checks}",
                                 prefix=SHM)
    assert code == 1, output
    assert "cannot allocate in /dev/shm as uid 65534: Permission denied: /dev/shm is mode 0755" in \
        results["shm.allocatable"]["message"]
    loader = results["dataloader.throughput"]["message"]
    assert "the DataLoader's workers cannot start as uid 65534: /dev/shm is mode 0755 (owner uid 0)" in loader, loader
    assert "chmod 1777 /dev/shm" in loader


def test_fmriprep_3059_the_jobs_users_process_limit_counts_its_other_tasks(work, child):
    uid = 1001
    if subprocess.run(["pgrep", "-u", str(uid)], capture_output=True).returncode == 0:
        pytest.skip(f"processes of uid {uid} run here already")
    data = work / "data"
    for index in range(200):
        data.mkdir(exist_ok=True)
        (data / f"{index:04d}.jpg").write_bytes(os.urandom(5_000))
    others = [subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "120"])
              for _ in range(40)]  # another job of the same user
    try:
        checks = f"""
          dataloader:
            path: {data}
            duration: 0.5s
            num_workers: 8
            throughput: {{min: 1 samples/s}}
            pids_headroom: {{min: 0 %}}
        """
        limit = ("prlimit", "--nproc=60:60")
        code, results, output = gate(work, child, f"version: 1\nchecks:{checks}", prefix=limit)
        assert code == 0, output  # root is not held to RLIMIT_NPROC
        assert results["dataloader.pids_available"]["value"] > 1000
        code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: '{uid}:{uid}'}}\nchecks:{checks}",
                                     prefix=limit)
        assert code == 1, output
        assert "dataloader.pids_available" in results, output
        assert results["dataloader.pids_available"]["value"] <= 25  # about 60 less the other job's 40 tasks
        assert "RLIMIT_NPROC limit 60 reached" in results["dataloader.pids_headroom"]["message"], results
    finally:
        for process in others:
            process.kill()
            process.wait()


def test_a_job_user_that_cannot_run_preflight_is_told_before_anything_is_measured(work):
    """The gate run from an install only root may read (a venv under /root, a 0700 checkout): exit 2, named."""
    python = "/root/.preflight-unreadable-python"
    Path(python).symlink_to(os.path.realpath(sys.executable))
    try:
        path = write_config(work, "version: 1\ndefaults: {run_as: nobody}\nchecks:\n  shm: {}\n")
        run = subprocess.run([python, "-m", "preflight", "run", "-c", str(path)], cwd=work, capture_output=True,
                             text=True, timeout=120, env={**os.environ, "NO_COLOR": "1", "PREFLIGHT_LOCK": "off",
                                                          "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    finally:
        os.unlink(python)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "preflight: error: the job's user, uid 65534 (nobody), gid 65534 (defaults.run_as), cannot run " \
           "preflight with" in run.stderr
    assert "install preflight where that user can read and run it" in run.stderr
