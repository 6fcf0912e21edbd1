"""Mount facts from real mountinfo text (proc(5) format) and from this machine's /dev/shm."""

from __future__ import annotations

import json
import os
import shlex
import sys
import textwrap

from preflight.host.fsinfo import filesystem_of
from tests.helpers import in_mount_namespace

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


def test_escaped_and_non_ascii_mount_points_decode_as_bytes_then_utf8(tmp_path, monkeypatch):
    # As the kernel writes them: space, tab, newline, backslash as octal; UTF-8 (é = c3 a9) and
    # any other byte (ff, not UTF-8) raw.
    table = tmp_path / "mountinfo"
    table.write_bytes(
        b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        b"50 27 0:50 / /mnt/data\\040set\\011\\012\\134x\xc3\xa9 rw,relatime - tmpfs my\\040tmpfs rw,size=1024k\n"
        b"51 27 0:51 / /mnt/raw\xff rw - ext4 /dev/vdb rw\n")
    real_statvfs = os.statvfs
    monkeypatch.setattr("os.statvfs", lambda path: real_statvfs("/"))
    monkeypatch.setattr("os.path.realpath", lambda path: path)
    named = filesystem_of("/mnt/data set\t\n\\xé/train", str(table))
    assert (named.mount_point, named.fstype, named.source) == ("/mnt/data set\t\n\\xé", "tmpfs", "my tmpfs")
    raw = filesystem_of(os.fsdecode(b"/mnt/raw\xff/a"), str(table))
    assert raw.mount_point == "/mnt/raw\udcff" == os.fsdecode(b"/mnt/raw\xff")  # as os.path.realpath names it
    assert filesystem_of("/mnt/data set", str(table)).mount_point == "/"  # a prefix of a name is not its mount


def test_a_real_tmpfs_at_a_path_with_escaped_and_non_ascii_characters_is_found(tmp_path):
    mount_point = tmp_path / "data set é\ttab\\back\nline"
    script = f"""
        set -e
        mkdir -p {shlex.quote(str(mount_point))}
        mount -t tmpfs -o size=1m 'my tmpfs' {shlex.quote(str(mount_point))}
        mkdir {shlex.quote(str(mount_point / "train"))}
        {shlex.quote(sys.executable)} -c '
import json, sys
from preflight.host.fsinfo import filesystem_of
fs = filesystem_of(sys.argv[1])
print(json.dumps([fs.mount_point, fs.fstype, fs.source, fs.size_bytes]))' {shlex.quote(str(mount_point / "train"))}
        """
    done = in_mount_namespace(textwrap.dedent(script))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [str(mount_point), "tmpfs", "my tmpfs", 1 << 20]
