"""Real dataset shapes, built for real at small scale, so every check is tried against them.

Each builder writes the shape under a directory it is given and returns the path a user
would point preflight at. Bytes are random (incompressible), files are synced, so reads
of them reach the disk as a real dataset's would.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Iterator

MiB = 1 << 20
NOBODY = 65534  # uid and gid of `nobody` on Debian and most images


def imagenet(root: Path, classes: int = 10, per_class: int = 100, size: int = 110_000) -> Path:
    """ImageNet's train/ shape: ``classes`` folders (``n01440764``...) of ``per_class`` JPEG-named files."""
    for c in range(classes):
        folder = root / f"n{1440764 + c:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (folder / f"n{1440764 + c:08d}_{i}.JPEG").write_bytes(os.urandom(size + (i % 7) * 512))
    os.sync()
    return root


def hf_cache(root: Path, files: int = 300, size: int = 110_000) -> Path:
    """A Hugging Face hub cache: ``snapshots/<rev>/train/img_N.jpg -> ../../../blobs/<sha256>``, and a
    directory loop ``snapshots/<rev>/loop -> ../..``. Returns the snapshot directory."""
    blobs, snapshot = root / "blobs", root / "snapshots" / ("0" * 40)
    blobs.mkdir(parents=True)
    (snapshot / "train").mkdir(parents=True)
    for i in range(files):
        data = os.urandom(size)
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        (snapshot / "train" / f"img_{i:04d}.jpg").symlink_to(f"../../../blobs/{digest}")
    (snapshot / "loop").symlink_to("../..")
    os.sync()
    return snapshot


def symlink_farm(root: Path, cache: Path, mounted_at: Path, files: int = 400, size: int = 50_000) -> Path:
    """DVC's ``symlink`` cache type (treeverse/dvc#4520): ``root/train/cls{0..3}/N.jpg`` each a link to its blob
    ``files/md5/<2 hex>/<30 hex>`` in a cache built under ``cache``, which a test mounts at ``mounted_at`` (the links
    name that place and dangle until then). Returns ``root``."""
    for i in range(files):
        data = os.urandom(size)
        digest = hashlib.md5(data).hexdigest()
        blob = cache / "files" / "md5" / digest[:2] / digest[2:]
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = root / "train" / f"cls{i % 4}" / f"{i:04d}.jpg"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(mounted_at / blob.relative_to(cache))
    os.sync()
    return root


def ext4_image(source: Path, image: Path, size_mb: int = 64, inodes: int | None = None) -> Path:
    """A real ext4 filesystem image holding the tree under ``source`` (``mkfs.ext4 -d``), for a test to mount
    in a private mount namespace with ``loop_mount``; with ``inodes``, that many in all (``mkfs.ext4 -N``).
    Skips the test where e2fsprogs is missing."""
    import pytest

    mkfs = shutil.which("mkfs.ext4") or shutil.which("mkfs.ext4", path="/usr/sbin:/sbin")
    if mkfs is None:
        pytest.skip("no mkfs.ext4 (e2fsprogs) to build a real filesystem")
    count = ["-N", str(inodes)] if inodes else []
    done = subprocess.run([mkfs, "-q", "-F", *count, "-d", str(source), str(image), f"{size_mb}M"],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"mkfs.ext4 -d failed: {done.stderr.strip()}")
    return image


def loop_mount(image: Path, mount: Path, read_only: bool = False) -> str:
    """Shell commands (for ``tests.helpers.in_mount_namespace``) that mount ``image`` at ``mount`` through a loop
    device, read-only with ``read_only`` (``mount -o loop,ro``), as a dataset volume is mounted."""
    return f"mkdir -p {mount} && mount -o loop{',ro' if read_only else ''} {image} {mount} && "


def sparse_file(path: Path, size: int = 400 * MiB, every: int = 2) -> Path:
    """An LMDB-like preallocated file: ``size`` bytes made with truncate, one MiB in ``every`` written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)
        for mib in range(0, size // MiB, every):
            handle.seek(mib * MiB)
            handle.write(os.urandom(MiB))
        handle.flush()
        os.fsync(handle.fileno())
    return path


def videos(root: Path, count: int = 4, size: int = 20_000_000) -> Path:
    """A folder of ``count`` video clips of ``size`` bytes (``clip_N.mp4``): one sample per file, however large."""
    root.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (root / f"clip_{index:03d}.mp4").write_bytes(os.urandom(size))
    os.sync()
    return root


def tar_shards(root: Path, shards: int = 10, per_shard: int = 100, size: int = 110_000, grouped: bool = True) -> Path:
    """WebDataset-convention shards: ``shard-000000.tar`` ... holding ``KEY.jpg`` and ``KEY.cls`` per sample.

    ``grouped=False`` writes each shard's ``.jpg`` members first, then its ``.cls`` members (labels appended
    afterwards, webdataset/webdataset#140): the same samples, their members not adjacent.
    """
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        members = [(f"{s:06d}{i:04d}", extension, data) for i in range(per_shard)
                   for extension, data in (("jpg", os.urandom(size)), ("cls", str(i % 10).encode()))]
        if not grouped:
            members.sort(key=lambda member: member[1] == "cls")  # stable: every image, then every label
        with tarfile.open(root / f"shard-{s:06d}.tar", "w") as tar:
            for key, extension, data in members:
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    os.sync()
    return root


def mixed_permissions(root: Path, files: int = 140, unreadable: int = 60, size: int = 110_000,
                      private_files: int = 1) -> Path:
    """``files`` files under ``train/``, ``unreadable`` of them mode 600 owned by ``nobody``, and a folder
    ``private/`` mode 700 owned by ``nobody`` holding ``private_files`` more: for any other user without
    CAP_DAC_OVERRIDE (``WITHOUT_DAC``), those are what the job cannot read."""
    (root / "train").mkdir(parents=True)
    for i in range(files):
        name = root / "train" / f"{i:04d}.jpg"
        name.write_bytes(os.urandom(size))
        name.chmod(0o600 if i < unreadable else 0o644)
        if i < unreadable:
            os.chown(name, NOBODY, NOBODY)
    private = root / "private"
    private.mkdir()
    for i in range(private_files):
        (private / ("secret.jpg" if i == 0 else f"secret-{i:04d}.jpg")).write_bytes(os.urandom(size))
    private.chmod(0o700)
    os.chown(private, NOBODY, NOBODY)
    root.chmod(0o755)
    (root / "train").chmod(0o755)
    os.sync()
    return root


# A command prefix that runs a program as root without the capabilities that bypass file
# permissions (capabilities(7)): it reads what any user other than a file's owner may read.
WITHOUT_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def _churn(directory: str, stop_after: float) -> None:
    deadline = time.monotonic() + stop_after
    index = 0
    while time.monotonic() < deadline:
        name = os.path.join(directory, f"churn-{index % 50:03d}.bin")
        with open(name, "wb") as handle:
            handle.write(os.urandom(110_000))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, f"churn-{(index + 25) % 50:03d}.bin"))
        index += 1


@contextlib.contextmanager
def churning(directory: Path, seconds: float = 120) -> Iterator[None]:
    """Another process creating and deleting files in ``directory`` (at most ``seconds``) while the block runs."""
    directory.mkdir(parents=True, exist_ok=True)
    process = multiprocessing.get_context("fork").Process(target=_churn, args=(str(directory), seconds), daemon=True)
    process.start()
    time.sleep(0.3)  # files exist and vanish before the walk starts
    try:
        yield
    finally:
        process.kill()
        process.join()


def tiny_full_volume_script(mount: Path, size_mb: int = 400, files: int = 200, free_mb: int = 40) -> str:
    """Shell commands (for ``tests.helpers.in_mount_namespace``) that mount a real ``size_mb`` ext4 volume at
    ``mount`` (loop device), write ``files`` files of 110 kB under ``mount/data``, and fill it with
    fallocate until about ``free_mb`` MB are free."""
    image = f"{mount}.img"
    return (
        f"set -e; PATH=/usr/sbin:/sbin:$PATH; truncate -s {size_mb}M {image}; mkfs.ext4 -q -F -m 0 {image}; mkdir -p {mount}; "
        f"mount -o loop {image} {mount}; mkdir {mount}/data; "
        f"for i in $(seq 1 {files}); do head -c 110000 /dev/urandom > {mount}/data/$i.jpg; done; "
        f"avail=$(df -B1 --output=avail {mount} | tail -1); "
        f"fallocate -l $((avail - {free_mb} * 1000000)) {mount}/filler; sync; "
    )


def mixed_sources(root: Path, small: int = 1000, small_size: int = 2500, large: int = 40,
                  large_size: int = 1_000_000) -> Path:
    """Two sources merged in one tree, sorted so a prefix sees only one (dotnet/machinelearning#3778):
    ``a_cifar/`` of ``small`` CIFAR-sized PNGs, then ``b_hires/`` of ``large`` high-resolution JPEGs that hold
    most of the bytes."""
    for folder, count, size, extension in (("a_cifar", small, small_size, "png"), ("b_hires", large, large_size, "jpg")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (root / folder / f"{i:05d}.{extension}").write_bytes(os.urandom(size))
    os.sync()
    return root


def apple_double_image_folder(root: Path, classes: tuple[str, ...] = ("cat", "dog"), per_class: int = 80) -> Path:
    """An ImageFolder copied from a Mac and opened in Jupyter: real 256x256 JPEGs in class folders, each with
    its AppleDouble companion ``._NAME.jpg`` (a 4 KiB header, not an image: hako-mikan/sd-webui-traintrain#26),
    and a ``.ipynb_checkpoints`` folder among the classes (pytorch/vision#2831)."""
    import struct

    from PIL import Image

    def jpeg(path: Path) -> None:
        Image.frombytes("RGB", (256, 256), os.urandom(256 * 256 * 3)).save(path, quality=90)

    header = struct.pack(">II16sH", 0x00051607, 0x00020000, b"Mac OS X        ", 2)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            jpeg(root / name / f"img_{i:03d}.jpg")
            (root / name / f"._img_{i:03d}.jpg").write_bytes(header + b"\0" * (4096 - len(header)))
    (root / ".ipynb_checkpoints").mkdir()
    jpeg(root / ".ipynb_checkpoints" / "img_000-checkpoint.jpg")
    os.sync()
    return root
