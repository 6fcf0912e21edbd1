"""Mount facts from real mountinfo text (proc(5) format) and from this machine's /dev/shm."""

from __future__ import annotations

import os

from preflight.fsinfo import filesystem_of

MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684084k
40 27 0:40 / /data ro,relatime - nfs4 server:/export rw,vers=4.2
41 27 0:41 / /mnt/s3\\040bucket rw,nosuid - fuse.s3fs s3fs rw,user_id=0
42 27 0:42 / /var/lib/img rw - overlay overlay rw,lowerdir=/a,upperdir=/b
"""


def _fs(tmp_path, path):
    table = tmp_path / "mountinfo"
    table.write_text(MOUNTINFO)
    return filesystem_of(path, str(table))


def test_the_longest_mount_prefix_wins_and_its_kind_is_named(tmp_path):
    assert _fs(tmp_path, "/dev/shm").kind == "memory"
    assert _fs(tmp_path, "/tmp").fstype == "ext4"
    assert _fs(tmp_path, "/tmp").kind == "block"
    assert _fs(tmp_path, "/tmp").caveat() == ""


def test_network_fuse_and_overlay_mounts_carry_their_caveat(tmp_path, monkeypatch):
    real_statvfs = os.statvfs  # these mount points do not exist here; only the mount table is under test
    monkeypatch.setattr("os.statvfs", lambda path: real_statvfs("/"))
    monkeypatch.setattr("os.path.realpath", lambda path: path)
    nfs = _fs(tmp_path, "/data/train")
    assert (nfs.mount_point, nfs.fstype, nfs.source, nfs.kind) == ("/data", "nfs4", "server:/export", "network")
    assert nfs.read_only  # per-mount options say ro, whatever the superblock says
    assert "network filesystem" in nfs.caveat()
    fuse = _fs(tmp_path, "/mnt/s3 bucket/x")
    assert (fuse.mount_point, fuse.kind) == ("/mnt/s3 bucket", "fuse")
    assert "FUSE daemon" in fuse.caveat()
    assert _fs(tmp_path, "/var/lib/img/layer").kind == "overlay"


def test_this_machines_dev_shm_is_a_real_tmpfs():
    shm = filesystem_of("/dev/shm")
    assert shm.fstype == "tmpfs" and shm.memory_backed and shm.size_bytes > 0
    assert "tmpfs is RAM" in shm.caveat()
