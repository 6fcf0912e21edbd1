"""What the node is: the kernel's log ring buffer, read record by record from ``/dev/kmsg`` as ``dmesg`` does.

Method: util-linux dmesg and the kernel's Documentation/ABI/testing/dev-kmsg: open ``/dev/kmsg``
O_RDONLY|O_NONBLOCK (a reader starts at the oldest record the buffer still holds), each read() returns
one record ``prio,seq,usec,flags;message`` (continuation lines `` KEY=value`` follow), EAGAIN means no
more, EPIPE means the records next in line were overwritten while reading (the read goes on). The ring
buffer holds what fits in ``log_buf_len`` since boot: a first ``seq`` above 0 means older records are gone.
Opening needs CAP_SYSLOG when ``kernel.dmesg_restrict`` is 1 (EPERM otherwise; man 2 syslog), and, in a
container, the device itself (Docker and Kubernetes give a container no ``/dev/kmsg`` unless privileged).

``read`` takes the path to read: ``/dev/kmsg`` in a run; a test gives it a file or FIFO of its own holding
records in the device's format, one a line, and never writes the node's real log (a fake ``NVRM: Xid`` line
there stays until reboot, fails every later run of the xid check and reaches the node's other monitors).
"""

from __future__ import annotations

import errno
import os
from typing import NamedTuple

DEVICE = "/dev/kmsg"
CAP_SYSLOG = 34  # linux/capability.h
RECORD_BYTES = 8192  # the kernel's CONSOLE_EXT_LOG_MAX: a read with a smaller buffer fails with EINVAL
_RESTRICT = "/proc/sys/kernel/dmesg_restrict"


class Record(NamedTuple):
    """One record of the ring buffer: its sequence number, time since boot and message (newlines as ``\\x0a``)."""

    seq: int  # the kernel's sequence number: 0 is the first record since boot
    usec: int  # microseconds since boot (CLOCK_MONOTONIC)
    message: str


class Log(NamedTuple):
    """The records read, or why none could be (``reason``; records is empty then)."""

    records: tuple[Record, ...]
    reason: str
    lost: int = 0  # records overwritten while this read ran (EPIPE)
    source: str = DEVICE  # the path read: /dev/kmsg, or a test's file of records in its format


_STATUS = "/proc/self/status"


def read(path: str = DEVICE, restrict_path: str = _RESTRICT) -> Log:
    """Every record the log at ``path`` holds now, oldest first; never blocks. ``reason`` says why it cannot be read.

    ``path`` is ``/dev/kmsg`` (each read() returns one record) or, in tests, a regular file or FIFO of records
    in its format, ``prio,seq,usec,flags;message`` one a line with `` KEY=value`` continuation lines (a read()
    returns several): records are split at line ends either way. Only opened for reading.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        return Log((), unreadable(path, error, restrict_path), source=path)
    records: list[Record] = []
    lost = 0
    pending = b""  # a file's last line, cut by the read's size: completed by the next read
    try:
        while True:
            try:
                raw = os.read(fd, RECORD_BYTES)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EPIPE:
                    lost += 1
                    continue
                return Log((), unreadable(path, error, restrict_path), source=path)
            if not raw:
                break
            *lines, pending = (pending + raw).split(b"\n")
            records += _records(lines)
    finally:
        os.close(fd)
    return Log(tuple(records + _records([pending])), "", lost, path)


def _records(lines: list[bytes]) -> list[Record]:
    """The records that start in ``lines``: a line that starts with a space continues the record before it."""
    return [record for line in lines if line and not line.startswith(b" ")
            for record in [parse(line)] if record is not None]


def parse(raw: bytes) -> Record | None:
    """One record as /dev/kmsg returns it: ``prio,seq,usec,flags;message`` then optional `` KEY=value`` lines."""
    text = raw.decode("utf-8", "replace")
    header, _, rest = text.partition(";")
    fields = header.split(",")
    if len(fields) < 3 or not fields[1].isdigit() or not fields[2].isdigit():
        return None
    return Record(int(fields[1]), int(fields[2]), rest.split("\n", 1)[0])


def unreadable(path: str, error: OSError, restrict_path: str = _RESTRICT, status_path: str = _STATUS) -> str:
    """Why ``path`` cannot be read, with what allows it.

    EPERM has two causes: ``kernel.dmesg_restrict=1`` without CAP_SYSLOG, or, with the capability (or
    no restriction), a container runtime whose device rules deny the node: a hostPath ``/dev/kmsg`` in a
    pod that is not privileged, even with every capability added (kubernetes/node-problem-detector#698).
    """
    what = f"cannot read the kernel log: {path}: {error.strerror}"
    if error.errno in (errno.EPERM, errno.EACCES):
        restrict = _text(restrict_path)
        if restrict == "1" and not _has_syslog(status_path):
            return (f"{what} (kernel.dmesg_restrict=1): this process lacks CAP_SYSLOG; add it "
                    f"(Kubernetes securityContext.capabilities.add: [SYSLOG], docker --cap-add SYSLOG) or set "
                    f"kernel.dmesg_restrict=0 on the host; in a container the device must also be allowed "
                    f"(privileged: true with a hostPath /dev/kmsg, docker --device /dev/kmsg)")
        return (f"{what} (kernel.dmesg_restrict={restrict or 'unknown'}, CAP_SYSLOG "
                f"{'held' if _has_syslog(status_path) else 'not needed'}): the container's device rules deny "
                f"{path}: run it privileged (Kubernetes privileged: true with a hostPath {path}; capabilities alone "
                f"do not open it), or docker --device {path}")
    if error.errno == errno.ENOENT:
        return (f"{what}: the container has no {path}: run privileged with a hostPath volume of {path} "
                f"(as node-problem-detector does), or docker --device {path}")
    return what


def _text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _has_syslog(status_path: str) -> bool:
    """Whether this process's effective capabilities (``CapEff`` in /proc/self/status) hold CAP_SYSLOG."""
    for line in _text(status_path).splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYSLOG & 1)
    return False
