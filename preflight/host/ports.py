"""Host layer: whether a TCP port can be listened on here, and which process holds it when it cannot.

A fleet's rendezvous (torchrun's TCPStore) listens on MASTER_PORT on node 0; another job's process on that
port makes torchrun exit at once with EADDRINUSE (pytorch/pytorch#126510). The holder is found as ``ss -ltnp``
finds it: the listening socket's inode in ``/proc/net/tcp`` and ``tcp6`` (state ``0A``, LISTEN; proc(5)),
then the process with a ``socket:[INODE]`` descriptor under ``/proc/PID/fd``. A process of another user, or
of another PID namespace sharing this network namespace (another container of a pod), shows its socket's
owner uid there but not its descriptors. Every function takes its /proc root so tests can use their own.
"""

from __future__ import annotations

import os
import pwd
import socket
from typing import NamedTuple

_LISTEN = "0A"  # the kernel's TCP_LISTEN, as /proc/net/tcp writes a socket's state


class Holder(NamedTuple):
    """A listening socket on the port: its owner's uid, and the process holding it where this user can see it."""

    uid: int
    pid: int | None  # None: no visible process has the socket open
    command: str  # the holder's command line, "" where pid is None


def in_use(port: int) -> OSError | None:
    """The error of listening on ``port`` on every IPv4 address (as torchrun's store does), or None when it can.

    SO_REUSEADDR as the store sets it, so a port whose last connections linger in TIME_WAIT counts as free.
    """
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("", port))
        probe.listen(1)
    except OSError as error:
        return error
    finally:
        probe.close()
    return None


def holders(port: int, proc: str = "/proc") -> list[Holder]:
    """Every socket listening on TCP ``port`` in this network namespace (IPv4 and IPv6), with its process."""
    sockets: dict[str, int] = {}  # inode -> owner uid
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", table)) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                sockets[fields[9]] = int(fields[7])
    owners = _processes({f"socket:[{inode}]" for inode in sockets}, proc)
    return [Holder(uid, *owners.get(f"socket:[{inode}]", (None, ""))) for inode, uid in sockets.items()]


def describe(found: list[Holder]) -> str:
    """``pid 4242 (user ci: python3 -m http.server 29500)``, per holder; what can be said of one not visible."""
    if not found:
        return "a process this node does not list (the socket is not in /proc/net/tcp: another network namespace?)"
    words = []
    for holder in found:
        if holder.pid is None:
            words.append(f"a process of user {_user(holder.uid)} not visible from here (another user's, or another "
                         f"container's in this pod)")
        else:
            words.append(f"pid {holder.pid} (user {_user(holder.uid)}: {holder.command[:200]})")
    return " and ".join(dict.fromkeys(words))


def _processes(targets: set[str], proc: str) -> dict[str, tuple[int, str]]:
    """For each socket link in ``targets`` (``socket:[INODE]``), the first process holding it and its command."""
    found: dict[str, tuple[int, str]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit() or len(found) == len(targets):
            continue
        folder = os.path.join(proc, entry, "fd")
        try:
            descriptors = os.listdir(folder)
        except OSError:  # gone, or another user's
            continue
        links = set()
        for fd in descriptors:
            try:
                links.add(os.readlink(os.path.join(folder, fd)))
            except OSError:  # closed since the listing (the listing's own descriptor, for one)
                continue
        for target in (targets & links) - set(found):
            found[target] = (int(entry), _command(proc, entry))
    return found


def _command(proc: str, pid: str) -> str:
    try:
        with open(os.path.join(proc, pid, "cmdline"), "rb") as handle:
            return " ".join(handle.read().replace(b"\0", b" ").decode(errors="replace").split())  # one line
    except OSError:
        return ""


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)

