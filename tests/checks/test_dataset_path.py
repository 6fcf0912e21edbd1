"""Issue 35, case 1: a dataset path that is not there is the config's mistake (exit 2), unless the node's mounts are
why (exit 1); a path the node cannot reach is the node's fault (exit 1). ``preflight/checks/dataset_path.py``.

Each case runs ``preflight run`` as a user would: the README's bundled thresholds.yaml with a mistyped DATA_DIR, a
file where the dataset's directory belongs, a node whose /etc/fstab lists the dataset's mount but has not mounted
it (a private mount namespace with that fstab bound over the node's), a FUSE mount whose daemon is gone.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests import fusefs
from tests.helpers import REPO, in_mount_namespace, run_cli, write_config

LOADER = """
version: 1
defaults: {{timeout: 60s, retries: 0}}
checks:
  dataloader:
    path: {path}
    duration: 1s
    throughput: {{min: 1 samples/s}}
"""


def _kill_daemon(mount: str) -> None:
    """SIGKILL the FUSE daemon this test started for ``mount`` (found by its command line, which names it)."""
    import os
    import signal
    import time

    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.fsencode(mount) in arguments and any(a.endswith(b"fusefs.py") for a in arguments):
            os.kill(int(pid), signal.SIGKILL)
            for _ in range(200):  # until the kernel says the daemon is gone (at most 10 s)
                try:
                    os.stat(mount)
                except OSError:
                    return
                time.sleep(0.05)
            return
    raise AssertionError(f"no FUSE daemon serves {mount}")


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    report = tmp_path / "report.json"
    completed = run_cli("run", *args, "--json", str(report), cwd=tmp_path, env=env)
    return completed, json.loads(report.read_text())


def test_a_mistyped_data_dir_with_the_bundled_gate_is_exit_2_naming_each_place_and_the_fix(tmp_path):
    """The README's run with DATA_DIR mistyped: storage and dataloader each say where the path was written, and the
    run exits 2, so the Slurm prolog and NPD plugin leave the node in rotation. `validate` cannot know: the dataset
    may exist only on the node that runs the gate (a CI runner has none), so it says valid."""
    typo = tmp_path / "imagenet-smaple"
    config = REPO / "thresholds.yaml"
    completed, report = _run(tmp_path, "-c", str(config), "--only", "storage,dataloader",
                             env={"DATA_DIR": str(typo)})
    assert completed.returncode == 2 and report["exit_code"] == 2, completed.stderr
    lines = config.read_text().splitlines()
    at = {name: next(i for i, line in enumerate(lines, 1) if line.startswith(f"  {name}:")) + 1
          for name in ("storage", "dataloader")}
    assert completed.stderr.splitlines()[-2:] == [
        f"preflight: error: {config}:{at[name]}:11: {name}.path: {typo} does not exist on this node: set "
        f"{name}.path (or DATA_DIR with the bundled thresholds.yaml) to the dataset's directory, or mount the "
        f"dataset there" for name in ("storage", "dataloader")]
    assert {r["verdict"] for r in report["results"]} == {"error"}
    assert "Traceback" not in completed.stderr
    validated = run_cli("validate", "-c", str(config), cwd=tmp_path, env={"DATA_DIR": str(typo)})
    assert validated.returncode == 0, validated.stderr


def test_a_file_where_the_datasets_directory_belongs_is_exit_2(tmp_path):
    (tmp_path / "train.tar").write_bytes(b"x" * 1000)
    config = write_config(tmp_path, LOADER.format(path=tmp_path / "train.tar"))
    completed, report = _run(tmp_path, "-c", str(config))
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.splitlines()[-1] == (f"preflight: error: {config}:5:11: dataloader.path: "
                                                 f"{tmp_path / 'train.tar'} is not a directory: point dataloader.path "
                                                 f"at the dataset's directory")


def test_a_dataset_under_a_mount_the_node_has_not_mounted_is_the_nodes_fault(tmp_path):
    """The node's /etc/fstab mounts the dataset's volume at /mnt/preflight-datasets, which is not mounted (at boot,
    a failed NFS mount): the node cannot serve the job, exit 1, saying which mount is missing."""
    fstab = tmp_path / "fstab"
    fstab.write_text("# <file system> <mount point> <type> <options> <dump> <pass>\n"
                     "/dev/vda / ext4 defaults 0 1\n"
                     "nfs.example:/export/datasets /mnt/preflight-datasets nfs ro,hard,_netdev 0 0\n")
    config = write_config(tmp_path, LOADER.format(path="/mnt/preflight-datasets/imagenet"))
    report = tmp_path / "report.json"
    run = " ".join(shlex.quote(part) for part in (sys.executable, "-m", "preflight", "run", "-c", str(config),
                                                   "--json", str(report)))
    completed = in_mount_namespace(f"mount --bind {shlex.quote(str(fstab))} /etc/fstab && cd {tmp_path} && {run}")
    assert completed.returncode == 1, completed.stderr
    [result] = [r for r in json.loads(report.read_text())["results"] if r["verdict"] != "info"]
    assert result["verdict"] == "fail" and result["message"].startswith(
        "could not measure: /mnt/preflight-datasets/imagenet does not exist: it lies under /mnt/preflight-datasets, "
        "which /etc/fstab mounts but is not mounted on this node: mount it (mount /mnt/preflight-datasets), then "
        "run again")


@pytest.mark.skipif(bool(fusefs.available()), reason=fusefs.available() or "FUSE can be mounted")
@pytest.mark.parametrize("check", ["storage", "dataloader"])
def test_a_dataset_on_a_mount_whose_daemon_is_gone_is_the_nodes_fault(tmp_path, check):
    """A FUSE client (s3fs, gcsfuse) that died leaves its mount answering ENOTCONN: the path is written right and
    is there on a healthy node, so the node fails (exit 1), naming the error, never exit 2."""
    (tmp_path / "data" / "imagenet").mkdir(parents=True)
    with fusefs.mounted(str(tmp_path / "data")) as mount:
        _kill_daemon(mount)  # the daemon gone, as when it crashes: its mount answers ENOTCONN
        body = LOADER if check == "dataloader" else LOADER.replace("dataloader", "storage").replace(
            "throughput: {{min: 1 samples/s}}", "seq_read: {{min: 1 MB/s}}")
        config = write_config(tmp_path, body.format(path=f"{mount}/imagenet"))
        completed, report = _run(tmp_path, "-c", str(config))
    assert completed.returncode == 1, completed.stderr
    [result] = [r for r in report["results"] if r["verdict"] != "info"]
    assert result["verdict"] == "fail" and (f"{mount}/imagenet cannot be reached (ENOTCONN: Transport endpoint is "
                                            f"not connected): the node's volume or mount fails") in result["message"]


MOUNTED = """
version: 1
defaults: {{timeout: 60s, retries: 0}}
checks:
  storage:
    path: {path}
    duration: 0.3s
    mounted: {{min: 1}}
  dataloader:
    path: {path}
    duration: 0.3s
    mounted: {{min: 1}}
"""


def _mounted_rows(report: Path) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(report.read_text())["results"] if r["metric"] in ("mounted", "seq_read")}


def test_issue_43_a_required_mount_that_is_missing_or_on_the_root_filesystem_fails_the_node(tmp_path):
    """The new user's most common bad node: the dataset's NFS mount did not come up. With `mounted: {min: 1}` the
    path missing, or an empty folder on the root filesystem where the mount should be, is the node's failure (exit
    1: the health check drains it, NPD reports it); without the threshold a missing path stays the config's
    mistake (exit 2)."""
    on_root = tmp_path.stat().st_dev == Path("/").stat().st_dev  # else no folder here lies on the root filesystem
    for where, made in (("missing", False), ("on-root", True))[:2 if on_root else 1]:
        path = tmp_path / where
        if made:
            path.mkdir()
            for index in range(30):
                (path / f"{index}.jpg").write_bytes(b"x" * 5000)
        report = tmp_path / f"{where}.json"
        run = run_cli("run", "-c", str(write_config(tmp_path, MOUNTED.format(path=path))), "--json", str(report),
                      cwd=tmp_path)
        assert run.returncode == 1, run.stdout + run.stderr
        rows = _mounted_rows(report)
        for instance in ("storage", "dataloader"):
            mounted = rows[f"{instance}.mounted"]
            assert (mounted["verdict"], mounted["value"]) == ("fail", 0.0), mounted
            said = ("does not exist on this node (No such file or directory): no filesystem is mounted there" if not made
                    else "lies on the root filesystem")
            assert said in mounted["message"] and f"mount the dataset's volume at {path}" in mounted["hint"]
    # the exit-2 rule stands without the threshold
    run = run_cli("run", "-c", str(write_config(tmp_path, MOUNTED.format(path=tmp_path / "missing").replace(
        "    mounted: {min: 1}\n", ""))), cwd=tmp_path)
    assert run.returncode == 2 and "does not exist on this node" in run.stderr, run.stderr


def test_issue_43_a_dataset_on_a_mount_of_its_own_passes_mounted(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    report = tmp_path / "report.json"
    config = write_config(tmp_path, MOUNTED.format(path=data))
    made = "; ".join(f"head -c 5000 /dev/urandom > {data}/{i}.jpg" for i in range(30))
    done = in_mount_namespace(f"mount -t tmpfs -o size=16m tmpfs {shlex.quote(str(data))} && {made} && "
                              f"{shlex.quote(sys.executable)} -m preflight run -c {config} --json {report}")
    rows = _mounted_rows(report)
    assert rows["storage.mounted"]["value"] == 1.0 and rows["dataloader.mounted"]["value"] == 1.0, done.stdout
    assert f"the mount holding {data}: tmpfs at {data}" in rows["storage.mounted"]["method"]
