"""Which filesystem holds a path, from /proc/self/mountinfo and statvfs (host layer): tmpfs is RAM, overlay a
container's layer, FUSE and NFS a daemon or the network, and a figure means something else on each."""

from __future__ import annotations

import os
import re
from typing import NamedTuple

MEMORY_BACKED = ("tmpfs", "ramfs")
NETWORK = ("nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p", "virtiofs")
# Kernel interfaces mounted as filesystems: no dataset lives there (``dataset_walk`` does not descend them).
PSEUDO = ("proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore",
          "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs", "autofs", "nsfs", "hugetlbfs",
          "rpc_pipefs", "selinuxfs", "nfsd", "sockfs", "pipefs")
MOUNTINFO = "/proc/self/mountinfo"


class Filesystem(NamedTuple):
    mount_point: str
    fstype: str  # "ext4", "tmpfs", "overlay", "fuse.s3fs", "nfs4", ...
    source: str  # the device or server ("/dev/nvme0n1p1", "server:/export")
    options: str  # mount options ("rw,relatime")
    size_bytes: int
    free_bytes: int  # available to an unprivileged user (statvfs f_bavail)
    # A volume out of inodes refuses creates with ENOSPC though bytes are free; 0 total: none reported (btrfs).
    total_inodes: int = 0  # statvfs f_files
    free_inodes: int = 0  # available to an unprivileged user (statvfs f_favail)

    @property
    def memory_backed(self) -> bool:
        return self.fstype in MEMORY_BACKED

    @property
    def pseudo(self) -> bool:
        """A kernel interface (proc, sysfs, cgroup ...), not storage: ``PSEUDO``."""
        return self.fstype in PSEUDO

    @property
    def read_only(self) -> bool:
        return "ro" in self.options.split(",")

    @property
    def kind(self) -> str:
        """``memory``, ``overlay``, ``fuse``, ``network`` or ``block``: what a number on it means."""
        if self.memory_backed:
            return "memory"
        if self.fstype == "overlay":
            return "overlay"
        if self.fstype == "fuse" or self.fstype.startswith("fuse."):
            return "fuse"
        return "network" if self.fstype.split(".")[0] in NETWORK else "block"

    @property
    def may_cache_below(self) -> bool:
        """Whether a cache can sit below the page cache, out of reach of O_DIRECT and fadvise: a FUSE daemon's
        own (s3fs, gcsfuse, mountpoint-s3, Alluxio, JuiceFS), a network client's (NFS, CIFS, Lustre), or the
        host page cache under a loop device backed by a file; there a second read of a file is no device read."""
        return self.kind in ("fuse", "network", "overlay") or self.source.startswith("/dev/loop")

    def caveat(self) -> str:
        """What this filesystem type does to a storage number, or "" for a plain block device."""
        return {
            "memory": f"{self.fstype} is RAM: reads are memory speed, cache-bound, not a storage device",
            "overlay": "overlay is a container's writable layer: the image's disk, not a dataset volume",
            "fuse": f"{self.fstype} goes through a FUSE daemon: its own caching and latency apply",
            "network": f"{self.fstype} is a network filesystem: client caching and the network apply",
        }.get(self.kind, "")

    def describe(self) -> str:
        return f"{self.fstype} at {self.mount_point} ({self.source}, {self.options})"


def filesystem_of(path: str, mountinfo: str = MOUNTINFO) -> Filesystem:
    """The mount that holds ``path`` (the longest mount point that is a prefix of it; mountinfo unescaped as bytes,
    proc(5)).

    Raises:
        OSError: ``path`` does not exist.
    """
    real = os.path.realpath(path)
    stat = os.statvfs(real)
    mount_point, fstype, source, options, _ = mount_entry(real, mountinfo)
    return Filesystem(mount_point, fstype, source, options, size_bytes=stat.f_blocks * stat.f_frsize, free_bytes=stat.f_bavail * stat.f_frsize,
                      total_inodes=stat.f_files, free_inodes=stat.f_favail)


def mount_entry(path: str, mountinfo: str = MOUNTINFO) -> tuple[str, str, str, str, str]:
    """(mount point, fstype, source, options, major:minor) of the longest mount point prefixing ``path``, by name from
    mountinfo, never touching ``path``; ("/", "unknown", "unknown", "", "") when unreadable."""
    return _entry(path, mountinfo)[:5]  # type: ignore[return-value]


def mount_root(path: str, mountinfo: str = MOUNTINFO) -> tuple[str, str]:
    """(root, major:minor) of the mount holding ``path``: ``root`` is the folder of its filesystem mounted there
    (proc(5) field 4), "/" for a filesystem mounted whole, another folder for a bind mount (``mount --bind``, a
    container's volume, a Kubernetes hostPath or the kubelet's folder of a pod's volume) or a subvolume; ("/", "")
    when unreadable."""
    entry = _entry(path, mountinfo)
    return entry[5], entry[4]


def _entry(path: str, mountinfo: str) -> tuple[str, str, str, str, str, str]:
    """``mount_entry``'s fields, then the mount's root."""
    best = ("/", "unknown", "unknown", "", "", "/")
    try:
        with open(mountinfo, "rb") as lines:
            for line in lines:
                fields = line.split()
                separator = fields.index(b"-")
                mount_point = _unescape(fields[4])
                if _contains(mount_point, path) and len(mount_point) >= len(best[0]):
                    best = (mount_point, os.fsdecode(fields[separator + 1]), _unescape(fields[separator + 2]),
                            os.fsdecode(fields[5]), os.fsdecode(fields[2]), _unescape(fields[3]))
    except (OSError, ValueError, IndexError):
        pass
    return best


FSTAB = "/etc/fstab"


def unmounted(path: str, fstab: str = FSTAB, mountinfo: str = MOUNTINFO) -> str:
    """The longest mount point ``fstab`` lists at or above ``path`` that is not mounted now, else "": a dataset
    missing there is the node's fault, not the config's (issue 35). Read by name (fstab(5), proc(5)), nothing under
    ``path`` touched; swap entries and unreadable files count as none."""
    mounted = set()
    try:
        with open(mountinfo, "rb") as lines:
            mounted = {_unescape(line.split()[4]) for line in lines if len(line.split()) > 4}
        with open(fstab, "rb") as lines:
            listed = [_unescape(fields[1]) for fields in (line.split() for line in lines)
                      if len(fields) > 2 and not fields[0].startswith(b"#") and fields[2] != b"swap"
                      and fields[1].startswith(b"/")]
    except OSError:
        return ""
    absolute = os.path.abspath(path)
    missing = [point.rstrip("/") or "/" for point in listed if _contains(point, absolute)
               and (point.rstrip("/") or "/") not in mounted]
    return max(missing, key=len, default="")


def _contains(mount_point: str, path: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


_OCTAL = re.compile(rb"\\([0-7]{3})")


def _unescape(field: bytes) -> str:
    """A mountinfo field as a name: octal escapes (fs/proc_namespace.c ``show_mountinfo``) back to bytes, then
    ``os.fsdecode``: the string ``os.path.realpath`` returns."""
    return os.fsdecode(_OCTAL.sub(lambda octal: bytes([int(octal[1], 8)]), field))
