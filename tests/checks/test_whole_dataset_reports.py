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
4. ShivamShrirao/diffusers#134, pytorch/vision#552: a tag file ``NAME.txt`` beside each image, and images named
   ``.JPG`` and ``.webp``. With ``decode: image`` the gate decoded the tags as images and failed the node; a folder
   dataset of images (torchvision's ImageFolder) lists by extension, in any case, and never opens them.
5. layumi/University1652-Baseline#46, wtyhub/MuseNet#5: class folders with no image, on which ImageFolder raises
   "Found no valid file for the classes 1057, 1100, ...".
6. pytorch/examples#412: the images straight under the root, in no class folder: ImageFolder finds no class.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests import datasets, fusefs
from tests.helpers import in_mount_namespace, job_package, run_cli, write_config

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
        assert (f"device {os.major(root)}:{os.minor(root)}): {data} is its folder {source} mounted again there (a "
                f"bind mount, or a subvolume), not a volume mounted for the dataset") in row["message"], row["message"]
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


DECODED = """
version: 1
defaults: {{timeout: 120s, retries: 0}}
checks:
  dataloader:
    path: {path}
    duration: 0.3s
    decode: image
    include: "{include}"
    scan: all
    num_workers: 2
    batch_size: 8
    worker_pools: 1
    throughput: {{min: 1 samples/s}}
    unreadable_samples: {{max: 0}}
"""


def _image(path: Path, side: int = 340) -> None:
    """A real image of noise (about 65 kB as a JPEG), in the format its name says."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(
        buffer, "WEBP" if path.suffix.lower() == ".webp" else "JPEG")
    path.write_bytes(buffer.getvalue())


def _decoded(tmp_path: Path, path: Path, include: str = "*", name: str = "report") -> tuple[int, dict[str, dict], str]:
    """``preflight run`` of ``DECODED`` over ``path``: its exit code, rows by id, and its output."""
    report = tmp_path / f"{name}.json"
    config = write_config(tmp_path, DECODED.format(path=path, include=include), f"{name}.yaml")
    run = run_cli("run", "-c", str(config), "--json", str(report), cwd=tmp_path, timeout=240)
    assert report.exists(), run.stdout + run.stderr
    code, rows = _rows(report)
    assert code == run.returncode
    return code, rows, run.stdout + run.stderr


def test_tag_files_beside_the_images_are_left_out_as_a_folder_dataset_leaves_them_and_counted(tmp_path):
    """diffusers#134: 150 images (120 .jpg, 15 .JPG, 15 .webp), each with its tags in NAME.txt. With decode: image
    and the bundled config's include: "*", the gate decoded the 150 tag files as images: unreadable_samples FAIL 150,
    exit 1, the node drained for a dataset every node holds and ImageFolder never opens. Now the images are read as
    a folder dataset lists them (ImageFolder's extensions, any case: .JPG and .webp among them), the 150 tag files
    left out and counted in the table: exit 0. Naming them in include reads them as the reporter's job did, and
    fails as it did; include "*.jpg" reads the .jpg only and says what it left out."""
    folder = tmp_path / "instance"
    folder.mkdir()
    for index in range(150):
        _image(folder / f"img_{index:04d}.{'JPG' if index % 10 == 3 else 'webp' if index % 10 == 7 else 'jpg'}")
        (folder / f"img_{index:04d}.txt").write_text("1girl, solo, long hair, looking at viewer, smile\n")
    code, rows, output = _decoded(tmp_path, folder)
    unreadable = rows["dataloader.unreadable_samples"]
    assert code == 0 and (unreadable["verdict"], unreadable["value"]) == ("pass", 0), output
    note = unreadable["note"]
    assert (f"left out under {folder}: 150 files (.txt: 150) not images by name, as a folder dataset of images "
            f"leaves them out (torchvision's ImageFolder lists .jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, "
            f".webp, in any case); a job that lists every file decodes them too and fails: name them in include "
            f'("*.jpg,*.txt") to read them as it does') in note, note
    assert "scan: all read the rest of the 150 files: " in note, note
    assert f"150 files under {folder}" in rows["dataloader.throughput"]["method"]
    code, rows, output = _decoded(tmp_path, folder, "*.jpg,*.JPG,*.webp,*.txt", "every-file")
    unreadable = rows["dataloader.unreadable_samples"]
    assert code == 1 and (unreadable["verdict"], unreadable["value"]) == ("fail", 150), output
    assert f"150 of 300 files cannot be decoded: {folder}/img_0000.txt, " in unreadable["message"]
    code, rows, output = _decoded(tmp_path, folder, "*.jpg", "lower-case-jpg")
    assert (f"left out under {folder}: 180 files (.txt: 150, .JPG: 15, .webp: 15) by include='*.jpg' exclude=''"
            in rows["dataloader.unreadable_samples"]["note"]), rows["dataloader.unreadable_samples"]["note"]
    assert code == 0 and f"120 files under {folder}" in rows["dataloader.throughput"]["method"], output


def test_class_folders_holding_no_image_are_named_as_imagefolder_raises_on_them(tmp_path):
    """University1652-Baseline#46: 12 class folders under train/google, 3 of them empty. The job's ImageFolder raises
    at its start, on every node; the gate read the 153 images and said nothing. Its table now names the 3 folders
    and what ImageFolder does with them (the node passes: its storage serves every image). Given the job's own
    Dataset (a folder dataset with ImageFolder's rules), the run is the job's error, exit 2, in its own words."""
    train = tmp_path / "University-1652" / "train" / "google"
    for index in range(12):
        folder = train / f"{1000 + index * 7}"
        folder.mkdir(parents=True)
        if index not in (3, 7, 9):
            for image in range(17):
                _image(folder / f"image-{image:02d}.jpeg")
    code, rows, output = _decoded(tmp_path, train)
    note = rows["dataloader.unreadable_samples"]["note"]
    assert code == 0 and rows["dataloader.throughput"]["verdict"] == "pass", output
    assert (f"3 of the 12 folders under {train} hold no image (1021, 1049, 1063): torchvision's ImageFolder raises "
            f'FileNotFoundError on them ("Found no valid file for the classes ...") unless allow_empty=True') in note
    src = job_package(tmp_path / "src", "job", {"data": IMAGE_FOLDER})
    config = write_config(tmp_path, f"""
version: 1
defaults: {{timeout: 120s, retries: 0}}
checks:
  dataloader:
    dataset: "job.data:ImageFolder"
    dataset_args: {{root: {train}}}
    python_path: [{src}]
    duration: 0.3s
    num_workers: 1
    throughput: {{min: 1 samples/s}}
""", "job.yaml")
    run = run_cli("run", "-c", str(config), cwd=tmp_path, timeout=240)
    assert run.returncode == 2, run.stdout + run.stderr
    assert ("FileNotFoundError: Found no valid file for the classes 1021, 1049, 1063. Supported extensions are: "
            ".jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp") in run.stdout + run.stderr


def test_images_in_no_class_folder_are_counted_as_imagefolder_finds_no_class(tmp_path):
    """pytorch/examples#412: 150 images straight under the folder given to ImageFolder, which raises "Found 0 images in
    subfolders" (today: "Couldn't find any class folder"). The gate read them all and said nothing of it; its table
    now says ImageFolder finds no class folder there (a flat folder dataset, as a DreamBooth job's, reads them)."""
    folder = tmp_path / "mine" / "1" / "2"
    folder.mkdir(parents=True)
    for index in range(150):
        _image(folder / f"{index:04d}.jpg")
    code, rows, output = _decoded(tmp_path, folder)
    note = rows["dataloader.unreadable_samples"]["note"]
    assert code == 0 and rows["dataloader.throughput"]["verdict"] == "pass", output
    assert (f"the 150 images lie directly under {folder}, in no folder: torchvision's ImageFolder takes the folders "
            f"under it as classes, finds none and raises FileNotFoundError (a flat folder dataset reads them)") in note


# A folder dataset with torchvision's ImageFolder rules (torchvision/datasets/folder.py: find_classes by os.scandir,
# make_dataset by os.walk(followlinks=True) and the extension in any case, an empty class raising), as a job that
# cannot install torchvision beside its torch writes it; the gate runs it as the job's own Dataset.
IMAGE_FOLDER = """
import os

import torch

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class ImageFolder(torch.utils.data.Dataset):
    def __init__(self, root):
        classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {root}.")
        self.samples, found = [], set()
        for index, name in enumerate(classes):
            for folder, _, names in sorted(os.walk(os.path.join(root, name), followlinks=True)):
                for file in sorted(names):
                    if file.lower().endswith(IMG_EXTENSIONS):
                        self.samples.append((os.path.join(folder, file), index))
                        found.add(name)
        empty = set(classes) - found
        if empty:
            raise FileNotFoundError(f"Found no valid file for the classes {', '.join(sorted(empty))}. "
                                    f"Supported extensions are: {', '.join(IMG_EXTENSIONS)}")

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        with open(self.samples[index][0], "rb") as handle:
            return torch.tensor(len(handle.read())), self.samples[index][1]
"""
