"""Issue 43, its last "Done when": public reports of the same kinds, built here and run through ``preflight run``.

Kinds: a required mount that is absent (the job then reads an empty folder, the node's disk, or nothing), and the
job's listing of its data that differs from the gate's.

1. kubernetes-csi/csi-driver-nfs#762, cubefs/cubefs#3684: a pod's PVC "appears to mount correctly" but its files go
   to the node's disk: the container's volume is the kubelet's own folder
   ``pods/UID/volumes/kubernetes.io~csi/PV/mount``, on which the CSI driver mounted nothing. Built: that folder on an
   ext4 image (the node's kubelet disk), bind-mounted at the dataset's path in a private mount namespace.
2. amazonlinux/amazon-linux-2023#468, openzfs/zfs#971: an fstab ``bind`` of a folder whose filesystem mounts later
   (ZFS, NFS) binds the root filesystem's empty folder ("/dev/nvme0n1p1 on /home/user1/ftp type xfs").
3. GoogleCloudPlatform/gcsfuse#489, #142: the bucket mounts ("File system has been successfully mounted") but,
   without --implicit-dirs, its folders are not listed: the dataset's folder does not exist under a mount that is up.
   Built with tests/fusefs.py over a bucket whose top level shows only its README.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests import datasets, fusefs
from tests.helpers import in_mount_namespace, run_cli, write_config

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


def _preflight(config: Path, report: Path) -> str:
    """The shell words that run ``preflight run -c config --json report`` with this Python."""
    return " ".join(shlex.quote(part) for part in (sys.executable, "-m", "preflight", "run", "-c", str(config),
                                                   "--json", str(report)))


def _rows(report: Path) -> tuple[int, dict[str, dict]]:
    loaded = json.loads(report.read_text())
    return loaded["exit_code"], {r["id"]: r for r in loaded["results"]}


def _on_the_root_filesystem(path: Path) -> bool:
    return path.stat().st_dev == Path("/").stat().st_dev


def test_a_pvc_whose_csi_mount_is_absent_is_the_kubelets_own_folder_and_fails_mounted(tmp_path):
    """csi-driver-nfs#762: the container's path is the kubelet's folder for the PVC on the node's kubelet disk, with
    nothing mounted on it; `mounted` passed (a mount point of its own: the bind), exit 0, and the job would write
    its checkpoints to the node's disk. Now `mounted` is 0, naming the volume and the folder: exit 1. The same folder
    with a filesystem mounted on it first (as the CSI driver mounts its share) still passes."""
    node = tmp_path / "node"
    volume = node / "pods" / "7f3c1d2e" / "volumes" / "kubernetes.io~csi" / "pvc-3d5ca3d0" / "mount"
    volume.mkdir(parents=True)
    image = datasets.ext4_image(node, tmp_path / "kubelet.img", size_mb=16)
    (tmp_path / "share").mkdir()
    share = datasets.ext4_image(tmp_path / "share", tmp_path / "share.img", size_mb=8)  # what the driver would mount
    kubelet, data = tmp_path / "var-lib-kubelet", tmp_path / "data"
    data.mkdir()
    config = write_config(tmp_path, MOUNTED.format(path=data))
    absent, present = tmp_path / "absent.json", tmp_path / "present.json"
    folder = kubelet / volume.relative_to(node)
    done = in_mount_namespace(
        f"set -e; {datasets.loop_mount(image, kubelet)}mount --bind {folder} {data} && "
        f"{_preflight(config, absent)} || true; umount {data} && {datasets.loop_mount(share, folder)}"
        f"mount --bind {folder} {data} && {_preflight(config, present)}; true")
    if "mount: " in done.stderr and "failed" in done.stderr:
        pytest.skip(f"no loop mounts here: {done.stderr.strip()}")
    code, rows = _rows(absent)
    assert code == 1, done.stderr
    for instance in ("storage", "dataloader"):
        row = rows[f"{instance}.mounted"]
        assert (row["verdict"], row["value"]) == ("fail", 0.0), row
        assert (f"{data} is the kubelet's own folder for the pod's volume pvc-3d5ca3d0 (kubernetes.io~csi: "
                f"/pods/7f3c1d2e/volumes/kubernetes.io~csi/pvc-3d5ca3d0/mount on ext4 /dev/loop") in row["message"]
        assert ("with nothing mounted on it: the volume's mount (its CSI driver's, NFS's) is absent on this node, "
                "and the job would read and write the node's disk") in row["message"], row["message"]
    code, rows = _rows(present)
    assert rows["storage.mounted"]["value"] == rows["dataloader.mounted"]["value"] == 1.0, done.stderr
    assert code == 0, rows


def test_an_fstab_bind_of_a_folder_whose_filesystem_mounted_later_is_the_root_filesystem(tmp_path):
    """amazon-linux-2023#468: `/ftp/data /home/user1/ftp none bind` ran before the ZFS `ftp` mounted at /ftp/data,
    so /home/user1/ftp showed the root filesystem's empty folder. `mounted` passed it (a mount point); now it is 0,
    naming the root filesystem's folder: exit 1. Bound after the data's filesystem is mounted, it passes."""
    if not _on_the_root_filesystem(tmp_path):
        pytest.skip(f"{tmp_path} is not on the root filesystem")
    source, data = tmp_path / "ftp-data", tmp_path / "home-user1-ftp"
    source.mkdir()
    data.mkdir()
    (tmp_path / "pool").mkdir()
    pool = datasets.ext4_image(tmp_path / "pool", tmp_path / "pool.img", size_mb=8)
    config = write_config(tmp_path, MOUNTED.format(path=data))
    early, late = tmp_path / "early.json", tmp_path / "late.json"
    done = in_mount_namespace(
        f"set -e; mount --bind {source} {data} && {_preflight(config, early)} || true; umount {data} && "
        f"{datasets.loop_mount(pool, source)}mount --bind {source} {data} && {_preflight(config, late)}; true")
    if "mount: " in done.stderr and "failed" in done.stderr:
        pytest.skip(f"no loop mounts here: {done.stderr.strip()}")
    code, rows = _rows(early)
    assert code == 1, done.stderr
    root = os.stat("/").st_dev
    for instance in ("storage", "dataloader"):
        row = rows[f"{instance}.mounted"]
        assert (row["verdict"], row["value"]) == ("fail", 0.0), row
        assert (f"{data} lies on the root filesystem (") in row["message"], row["message"]
        assert (f"device {os.major(root)}:{os.minor(root)}): {data} is its folder {source}, bind-mounted there, not "
                f"a volume mounted for the dataset") in row["message"], row["message"]
    code, rows = _rows(late)
    assert rows["storage.mounted"]["value"] == rows["dataloader.mounted"]["value"] == 1.0, done.stderr
    assert code == 0, rows


@pytest.mark.skipif(bool(fusefs.available()), reason=fusefs.available() or "FUSE can be mounted")
def test_a_bucket_mounted_without_its_folders_names_the_mount_that_does_not_hold_the_dataset(tmp_path):
    """gcsfuse#489: the mount is up, `ls` of the dataset's folder finds nothing there. With `mounted: {min: 1}` the
    node fails (exit 1), as before, but the row said "no filesystem is mounted there" of a path under a FUSE mount
    that is up; now it names that mount. Without the threshold the path is the config's to fix (exit 2), as
    issue 43 keeps it."""
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    (bucket / "README.md").write_text("train/ and val/ hold the images\n")
    with fusefs.mounted(str(bucket)) as mount:
        config = write_config(tmp_path, MOUNTED.format(path=f"{mount}/train") + "    throughput: {min: 1 samples/s}\n")
        report = tmp_path / "report.json"
        run = run_cli("run", "-c", str(config), "--json", str(report), cwd=tmp_path)
        bare = run_cli("run", "-c", str(write_config(tmp_path, MOUNTED.format(path=f"{mount}/train").replace(
            "    mounted: {min: 1}\n", ""), "bare.yaml")), cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    code, rows = _rows(report)
    for instance in ("storage", "dataloader"):
        row = rows[f"{instance}.mounted"]
        assert (row["verdict"], row["value"]) == ("fail", 0.0), row
        assert (f"{mount}/train does not exist on this node (No such file or directory): fuse at {mount} (") in \
            row["message"] and ("is mounted above it and does not hold it (another export, bucket or subPath, or a "
                                "bucket mounted without its folders, as gcsfuse lists them without --implicit-dirs)"
                                ) in row["message"], row["message"]
        assert "no filesystem is mounted there" not in row["message"]
    assert rows["dataloader.throughput"]["message"].startswith(
        f"could not measure: {mount}/train does not exist on this node: fuse at {mount} is mounted but does not hold "
        f"it (dataloader.mounted is required)"), rows["dataloader.throughput"]["message"]
    assert bare.returncode == 2 and f"dataloader.path: {mount}/train does not exist on this node" in bare.stderr
