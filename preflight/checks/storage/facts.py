"""Filesystem facts that need no timing: type, free space and inodes, read-only mount, open-file limit."""

from __future__ import annotations

import errno
import os
import resource

from preflight.host.fsinfo import Filesystem
from preflight.io.scratch import ran_out
from preflight.measurement import Measurement, not_applicable
from preflight.units import to_unit

READ_ONLY_HINT = ("mount the dataset read-only: `readOnly: true` on the Kubernetes volumeMount, "
                  "or `-v /data:/data:ro` with Docker")
# What works on a read-only dataset volume, where no scratch can lie beside the dataset (issue 21 case 3).
READ_ONLY_VOLUME = ("no scratch can lie on a read-only volume: the dataset's own files of 8 MiB or more are read in "
                    "place and its small files read whole; scratch on another filesystem ({instance}.scratch_dir) is "
                    "measured but cannot pass a dataset threshold, and seq_write and fsync_p99 need a writable mount "
                    "of the dataset's device")
NOFILE_HINT = ("raise the open-file limit: `ulimit -n 65536`, Docker `--ulimit nofile=65536:65536`, "
               "or LimitNOFILE= in the systemd unit (DataLoader workers exhaust 1024)")


def facts(fs: Filesystem, path: str, note: str = "") -> list[Measurement]:
    """``filesystem`` (text), ``free_space`` (GiB), ``free_inodes`` (count), ``read_only`` (1/0), ``open_files_limit``
    (count) of ``fs``, the filesystem holding the dataset's bytes (``path`` a path on it); ``note``: the other
    filesystems the data lies on."""
    method = f"/proc/self/mountinfo and statvfs({path})"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    caveat = fs.caveat()
    return [
        Measurement("filesystem", fs.describe(), "text", method=method, reason=caveat, note=note),
        Measurement("free_space", to_unit(fs.free_bytes, "GiB"), "GiB", method=method + ": f_bavail * f_frsize"),
        free_inodes(fs, method),
        Measurement("read_only", 1.0 if fs.read_only else 0.0, "", method=f"mount options of {fs.mount_point}: "
                    f"{fs.options}", hint=READ_ONLY_HINT),
        Measurement("open_files_limit", float(soft if soft != resource.RLIM_INFINITY else 2**31), "",
                    method=f"getrlimit(RLIMIT_NOFILE): soft {soft}, hard {hard}", hint=NOFILE_HINT),
    ]


def free_inodes(fs: Filesystem, method: str) -> Measurement:
    """``free_inodes``: statvfs ``f_favail`` of ``f_files``; not applicable where the filesystem reports 0 inodes in
    all (btrfs, many network and FUSE ones)."""
    if fs.total_inodes <= 0:
        return not_applicable("free_inodes", f"{fs.fstype} at {fs.mount_point} reports 0 inodes in all (statvfs "
                              f"f_files): it allocates them as needed (btrfs, many network and FUSE filesystems), "
                              f"so no inode limit can be read", "")
    used = fs.total_inodes - fs.free_inodes
    return Measurement("free_inodes", float(fs.free_inodes), "", method=method + ": f_favail of f_files",
                       note=f"{fs.free_inodes} of {fs.total_inodes} inodes free ({100 * used / fs.total_inodes:.0f}% "
                            f"used)" if fs.free_inodes < fs.total_inodes / 10 else "")


def os_error_reason(error: OSError, path: str, instance: str = "storage", directory: str = "") -> str:
    """One line for a read or write that failed on the node, with the fix: ``instance`` names the option to set; on
    ENOSPC or EDQUOT, which ran out in ``directory``, inodes or bytes (``io.scratch.ran_out``)."""
    what = f"{error.strerror or error}" + (f": {error.filename}" if error.filename else "")
    full = ""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        place = directory or (os.path.dirname(os.fsdecode(error.filename)) if error.filename else "")
        full = ran_out(place) if place else ""
    elsewhere = f"or set {instance}.scratch_dir to a directory on another volume"
    fixes = {
        errno.ENOSPC: f"{full or 'the volume filled up during the run'}: "
                      f"{'delete small files' if 'no inodes' in full else 'free space'} on it, {elsewhere}",
        errno.EDQUOT: f"the disk quota is spent{f' ({full})' if full else ''}: free space {elsewhere}",
        errno.EMFILE: NOFILE_HINT,
        errno.ENFILE: "the system-wide open-file table is full (fs.file-max): close files or raise it",
        errno.EACCES: f"make {path} readable (and scratch_dir writable) for the job's user",
        errno.EPERM: f"make {path} readable (and scratch_dir writable) for the job's user",
        errno.ENOENT: "a file vanished during the run: measure a dataset no other process is rewriting",
        errno.EROFS: f"the volume is read-only; {READ_ONLY_VOLUME.format(instance=instance)}",
        errno.EIO: "I/O error: the device or network is failing (dmesg); drain the node",
    }
    fix = fixes.get(error.errno or 0, "")
    return f"{what}; {fix}" if fix else what
