"""Host layer: what a process that will not die is waiting on, and on which mount, read from /proc.

A process blocked on a dead NFS or FUSE mount sleeps in D through SIGKILL (fs/fuse/dev.c ``request_wait_answer``;
giampaolo/psutil#1931). Read from the stuck thread's ``/proc/PID/task/TID`` (``wchan``, ``stack``, ``syscall``, its
path from ``mem`` as strace does), the mount by name from mountinfo, never by ``stat`` (which would hang too).
docs/faults-and-noise.md ("Bounds: a mount that never answers").
"""

from __future__ import annotations

import os
import platform
from typing import NamedTuple

from preflight.host.fsinfo import MOUNTINFO, _contains, mount_entry

PROC = "/proc"
AT_FDCWD = -100
PATH_MAX = 4096

# System calls that wait on a file, by what names it: fd (arg 0), path (arg 0), or dirfd + path (args 0, 1).
# Numbers: arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h for arm64.
_BY_FD = ("read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "getdents64",
          "fstat", "fstatfs", "fsync", "fdatasync", "close", "ioctl", "lseek", "fadvise64", "flock", "fcntl",
          "sendfile", "copy_file_range", "readahead", "syncfs")
_BY_PATH = ("open", "stat", "lstat", "statfs", "access", "readlink", "getdents", "chdir", "truncate", "execve",
            "getxattr", "lgetxattr", "listxattr", "llistxattr")
_BY_DIR_PATH = ("openat", "openat2", "newfstatat", "statx", "faccessat", "faccessat2", "readlinkat", "mkdirat",
                "unlinkat", "execveat")
SYSCALLS = {
    "x86_64": {0: "read", 1: "write", 2: "open", 3: "close", 4: "stat", 5: "fstat", 6: "lstat", 8: "lseek",
               9: "mmap", 16: "ioctl", 17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev", 21: "access",
               40: "sendfile", 59: "execve", 72: "fcntl", 73: "flock", 74: "fsync", 75: "fdatasync",
               76: "truncate", 78: "getdents", 80: "chdir", 89: "readlink", 137: "statfs", 138: "fstatfs",
               187: "readahead", 191: "getxattr", 192: "lgetxattr", 194: "listxattr", 195: "llistxattr",
               217: "getdents64", 221: "fadvise64", 257: "openat", 258: "mkdirat", 262: "newfstatat",
               263: "unlinkat", 267: "readlinkat", 269: "faccessat", 295: "preadv", 296: "pwritev", 306: "syncfs",
               322: "execveat", 326: "copy_file_range", 327: "preadv2", 332: "statx", 437: "openat2",
               439: "faccessat2"},
    "aarch64": {17: "getcwd", 25: "fcntl", 29: "ioctl", 32: "flock", 34: "mkdirat", 35: "unlinkat", 43: "statfs",
                44: "fstatfs", 48: "faccessat", 49: "chdir", 56: "openat", 57: "close", 61: "getdents64",
                62: "lseek", 63: "read", 64: "write", 65: "readv", 66: "writev", 67: "pread64", 68: "pwrite64",
                69: "preadv", 70: "pwritev", 71: "sendfile", 78: "readlinkat", 79: "newfstatat", 80: "fstat",
                82: "fsync", 83: "fdatasync", 213: "readahead", 222: "mmap", 223: "fadvise64",
                221: "execve", 267: "syncfs", 281: "execveat", 285: "copy_file_range", 286: "preadv2",
                291: "statx", 437: "openat2", 439: "faccessat2"},
}


class Mount(NamedTuple):
    """The mount that holds a path, by name only (``mount_of``)."""

    mount_point: str
    fstype: str
    source: str
    device: str = ""  # "0:52": major:minor; for FUSE the minor is the connection's number under fusectl

    def advice(self) -> str:
        """The fix for a mount that does not answer: its server or daemon, never a longer timeout."""
        if self.fstype == "fuse" or self.fstype.startswith(("fuse.", "fuseblk")):
            connection = self.device.rpartition(":")[2] or "N"
            check = (f"check the FUSE daemon that serves it, or abort the connection (`umount -l {self.mount_point}`, "
                     f"or `echo 1 > /sys/fs/fuse/connections/{connection}/abort`)")
        elif self.fstype.split(".")[0] in ("nfs", "nfs4", "cifs", "smb3", "ceph", "glusterfs", "lustre", "9p"):
            check = (f"check its server ({self.source}) and the network to it, or unmount it "
                     f"(`umount -f -l {self.mount_point}`)")
        else:
            check = f"check the device or server behind it ({self.source}) and `dmesg`"
        return (f"the mount at {self.mount_point} ({self.fstype}, {self.source}) does not answer: {check}; "
                f"a longer `timeout` will not help")


class Blocked(NamedTuple):
    """One thread sleeping in the kernel, and what it waits on."""

    pid: int
    tid: int
    state: str  # "D" uninterruptible, "S" interruptible, ... (proc(5))
    wchan: str  # kernel function it sleeps in; "" when unreadable or 0
    syscall: str  # the blocked call's name ("newfstatat"), "syscall 999" when unknown, "" when not in one
    path: str  # the file it waits on; "" when none could be named
    stack: tuple[str, ...] = ()  # kernel frames, innermost first, without offsets; () unless root

    def where(self) -> str:
        """``newfstatat in process 812, kernel request_wait_answer < fuse_lookup_name``, as much as is known."""
        parts = [f"{self.syscall} in process {self.pid}" if self.syscall else f"process {self.pid}"]
        frames = [f for f in (self.stack or (self.wchan,)) if f and not f.startswith(("entry_", "do_syscall"))]
        if frames:
            parts.append("kernel " + " < ".join(frames[:4]))
        return ", ".join(parts)


def group(pgid: int, proc: str = PROC) -> list[int]:
    """Pids of the live processes in process group ``pgid``: a worker and every child it started. A zombie whose other
    thread still sleeps in D (SIGKILL ended only its main thread) is live."""
    found = []
    for name in _listdir(proc):
        if name.isdigit():
            fields = stat_fields(os.path.join(proc, name, "stat"))
            if fields and fields[2] == str(pgid) and (fields[0] != "Z" or _live_thread(proc, name)):
                found.append(int(name))
    return sorted(found)


def _live_thread(proc: str, pid: str) -> bool:
    tasks = os.path.join(proc, pid, "task")
    return any(stat_fields(os.path.join(tasks, tid, "stat"))[:1] not in ([], ["Z"]) for tid in _listdir(tasks))


def blocked(pids: list[int], states: str = "D", ignore: tuple[str, ...] = (), proc: str = PROC) -> list[Blocked]:
    """Every thread of ``pids`` whose state is one of ``states``, with what it waits on (uninterruptible first);
    ``ignore``: open files never waited on (the worker's log), for the newest-open-file fallback."""
    found = []
    for pid in pids:
        for tid_name in _listdir(os.path.join(proc, str(pid), "task")):
            task = os.path.join(proc, str(pid), "task", tid_name)
            fields = stat_fields(os.path.join(task, "stat"))
            if not fields or fields[0] not in states:
                continue
            wchan = _read(os.path.join(task, "wchan")).strip()
            stack = tuple(line.split("] ", 1)[-1].split("+", 1)[0]
                          for line in _read(os.path.join(task, "stack")).splitlines() if line.strip())
            syscall, path = _syscall(task, _read(os.path.join(task, "syscall")))
            found.append(Blocked(pid, int(tid_name), fields[0], "" if wchan == "0" else wchan, syscall,
                                 path or _newest_file(task, ignore), stack))
    return sorted(found, key=lambda b: (b.state != "D", not b.path, b.pid, b.tid))


def mount_of(path: str, mountinfo: str = MOUNTINFO) -> Mount:
    """The mount whose mount point is the longest prefix of ``path``, read by name: ``path`` is never touched."""
    mount_point, fstype, source, _, device = mount_entry(path, mountinfo)
    return Mount(mount_point, fstype, source, device)


def contains(mount_point: str, path: str) -> bool:
    """True when ``path`` is ``mount_point`` or under it, by name (neither is touched)."""
    return _contains(mount_point, path)


def _syscall(task: str, line: str) -> tuple[str, str]:
    """The call named by a ``/proc/.../syscall`` line and the path it waits on ("" when it names none)."""
    fields = line.split()
    if not fields or not fields[0].lstrip("-").isdigit() or int(fields[0]) < 0:
        return "", ""  # "running", or -1: not in a system call
    number = int(fields[0])
    name = SYSCALLS.get(platform.machine(), {}).get(number, f"syscall {number}")
    args = [int(a, 16) for a in fields[1:7]]
    if len(args) < 2:
        return name, ""
    if name in _BY_FD:
        return name, _fd_path(task, _signed(args[0]))
    if name in _BY_PATH:
        return name, _absolute(task, AT_FDCWD, _string(task, args[0]))
    if name in _BY_DIR_PATH:
        return name, _absolute(task, _signed(args[0]), _string(task, args[1]))
    return name, ""


def _signed(value: int) -> int:
    """An int argument as the kernel read it (its low 32 bits, signed): AT_FDCWD prints as 0xffffff9c or wider."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _string(task: str, address: int) -> str:
    """The NUL-terminated string at ``address`` in ``pid``'s memory, read page by page ("" when unreadable)."""
    if not address:
        return ""
    data = b""
    try:
        fd = os.open(os.path.join(task, "mem"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        while len(data) < PATH_MAX:
            chunk = os.pread(fd, 4096 - (address + len(data)) % 4096, address + len(data))  # never past a page
            if not chunk:
                break
            data += chunk
            if b"\0" in chunk:
                break
    except OSError:
        pass
    finally:
        os.close(fd)
    return os.fsdecode(data.split(b"\0", 1)[0]) if b"\0" in data else ""


def _absolute(task: str, directory_fd: int, name: str) -> str:
    if not name or name.startswith("/"):
        return name
    base = _link(os.path.join(task, "cwd")) if directory_fd == AT_FDCWD else _fd_path(task, directory_fd)
    return os.path.normpath(os.path.join(base, name)) if base.startswith("/") else ""


def _fd_path(task: str, fd: int) -> str:
    target = _link(os.path.join(task, "fd", str(fd))) if fd >= 0 else ""
    return target if target.startswith("/") else ""  # not "pipe:[...]" or "socket:[...]"


def _newest_file(task: str, ignore: tuple[str, ...]) -> str:
    """The open file or directory with the highest descriptor, outside /dev and /proc ("" when none)."""
    directory = os.path.join(task, "fd")
    for fd in sorted((int(n) for n in _listdir(directory) if n.isdigit()), reverse=True):
        target = _fd_path(task, fd)
        if target and not target.startswith(("/dev/", "/proc/", "/sys/")) and target not in ignore:
            return target
    return ""


def stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name: state, ppid, pgrp, ... ([] when gone; proc(5))."""
    text = _read(path)
    return text[text.rfind(")") + 1:].split() if ")" in text else []


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
