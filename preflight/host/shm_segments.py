"""Host layer: what holds a shared-memory mount's space, and whether the processes that made it still run.

Killed jobs' segments stay until unlinked (``torch_<pid>_...``, ``psm_<hex>``, ``sem.*``: sem_overview(7)). In use:
mapped or open in ``/proc/PID``; stale: held by no visible process, its creator gone (sgl-project/sglang#28089,
PaddlePaddle/Paddle#49632, mosaicml/streaming#781). ``survey`` sizes by ``st_blocks``, scans /proc within ``SCAN_S``.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from typing import NamedTuple

from preflight.units import format_value

SCAN_S = 2.0  # the most the /proc scan of who maps or holds a segment may take
MAX_FILES = 10000  # files of the mount looked at; the rest counted in ``Segments.more``
NAMED = 3  # the largest segments named in a note
TORCH = re.compile(r"^torch_(\d+)_")  # torch/csrc/CudaIPCTypes / libshm: "/torch_<pid>_<rand>_<n>"


class Segment(NamedTuple):
    name: str  # relative to the mount
    nbytes: int  # pages it holds: st_blocks * 512
    holders: tuple[int, ...]  # pids that map it or hold it open, among those visible here
    creator: int | None  # the pid in a torch_<pid>_ name, else None
    creator_alive: bool | None  # whether that pid runs here; None when the name has none

    @property
    def stale(self) -> bool:
        """Held by no process visible here, and (for a torch name) its creator is not running."""
        return not self.holders and self.creator_alive is not True


class Segments(NamedTuple):
    """The files on a shared-memory mount, but those ``survey`` was told to leave out (preflight's own); ``describe``
    and ``fix`` word them. Stale: held by no visible process, its creator (if named) gone."""

    path: str
    found: tuple[Segment, ...]
    more: int  # files beyond MAX_FILES, not looked at
    scan_complete: bool  # the /proc scan reached every process before SCAN_S ran out
    processes_seen: int  # processes whose maps and fds could be read
    processes_unreadable: int = 0  # another user's, where this process is not root: they may hold some

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.found)

    @property
    def stale(self) -> tuple[Segment, ...]:
        return tuple(s for s in self.found if s.stale)

    def describe(self, size_bytes: int) -> str:
        """One note: how many files hold how much of ``size_bytes``, the largest names, who holds them ("125 files
        left here hold 1000 MiB (98% of 1 GiB): torch_4242_1_0 (8 MiB, creator pid 4242 not running), ...")."""
        if not self.found:
            return ""
        share = f" ({100 * self.nbytes / size_bytes:.0f}% of {_size(size_bytes)})" if size_bytes else ""
        count = len(self.found) + self.more
        largest = sorted(self.found, key=lambda s: (-s.nbytes, not s.stale, s.name))[:NAMED]  # stale first in ties
        names = ", ".join(f"{s.name} ({_size(s.nbytes)}, {_whose(s)})" for s in largest)
        held = [s for s in self.found if s.holders]
        stale, gone = self.stale, [s for s in self.found if s.creator_alive is False and not s.holders]
        pids = sorted({pid for s in held for pid in s.holders})
        parts = []
        if stale:
            parts.append(f"{len(stale)} ({_size(sum(s.nbytes for s in stale))}) mapped or open in no process "
                         f"visible here" + (f", {len(gone)} of them torch_ segments whose creator is gone"
                                            if gone else ""))
        if held:
            more_pids = f" and {len(pids) - 5} more" if len(pids) > 5 else ""
            parts.append(f"{len(held)} ({_size(sum(s.nbytes for s in held))}) in use by pid "
                         + ", ".join(str(p) for p in pids[:5]) + more_pids)
        if not self.scan_complete:
            parts.append(f"the /proc scan stopped after {SCAN_S:g} s ({self.processes_seen} processes read): "
                         f"others may hold some")
        if self.processes_unreadable:
            unread = self.processes_unreadable
            parts.append(f"{unread} process{'es' if unread != 1 else ''} could not be read (permission): "
                         f"{'they' if unread != 1 else 'it'} may hold some")
        more = f" ({self.more} more files not looked at)" if self.more else ""
        return (f"{count} file{'s' if count != 1 else ''} left in {self.path} "
                f"hold{'s' if count == 1 else ''} {_size(self.nbytes)}{share}"
                f"{more}: largest {names}; " + "; ".join(parts))

    def fix(self) -> str:
        """What to do about the space they hold: remove the stale ones (named by pattern), or say who uses it."""
        stale = self.stale
        if stale:
            patterns = sorted({_pattern(s.name) for s in stale})
            shown = " ".join(_glob(os.path.join(self.path, p)) for p in patterns[:4])
            return (f"remove the stale segments left in {self.path} by earlier jobs ({len(stale)}, "
                    f"{_size(sum(s.nbytes for s in stale))}, held by no process here; e.g. `rm {shown}` once no job "
                    f"runs), and stop jobs leaving them: a DataLoader killed with SIGKILL leaves torch_<pid>_*, "
                    f"multiprocessing.shared_memory without unlink() leaves psm_*; or give each job its own /dev/shm "
                    f"(a memory-backed emptyDir per pod)")
        return (f"{self.path} is the right size but running processes hold its space (the note names them): give "
                f"this job its own /dev/shm (a memory-backed emptyDir per pod, --shm-size per container), or run it "
                f"where no other job shares the mount")


def survey(path: str, leave_out: tuple[str, ...] = ()) -> Segments:
    """The files under the shared-memory mount ``path`` but preflight's own (``leave_out``), with who holds each, read
    from /proc within ``SCAN_S``; never raises (an unreadable file or process is passed over)."""
    files: dict[tuple[int, int], tuple[str, int]] = {}
    more = 0
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(leave_out)]
        for name in names:
            if name.startswith(leave_out):
                continue
            full = os.path.join(root, name)
            try:
                stat = os.lstat(full)
            except OSError:
                continue
            if len(files) >= MAX_FILES:
                more += 1
                continue
            files[(stat.st_dev, stat.st_ino)] = (os.path.relpath(full, path), stat.st_blocks * 512)
    holders, complete, seen, unreadable = _holders(set(files))
    found = []
    for key, (name, nbytes) in files.items():
        match = TORCH.match(os.path.basename(name))
        creator = int(match.group(1)) if match else None
        alive = None if creator is None else os.path.exists(f"/proc/{creator}")
        found.append(Segment(name, nbytes, tuple(sorted(holders.get(key, ()))), creator, alive))
    return Segments(path, tuple(found), more, complete, seen, unreadable)


def _holders(keys: set[tuple[int, int]]) -> tuple[dict[tuple[int, int], set[int]], bool, int, int]:
    """For each (st_dev, st_ino) in ``keys`` the pids that map or hold it (/proc/PID/maps, fd); whether every process
    was reached in ``SCAN_S``; how many were read and how many refused."""
    found: dict[tuple[int, int], set[int]] = {}
    if not keys:
        return found, True, 0, 0
    devices = {dev for dev, _ in keys}
    deadline = time.monotonic() + SCAN_S
    seen = unreadable = 0
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found, False, 0, 0
    for pid in pids:
        if time.monotonic() > deadline:
            return found, False, seen, unreadable
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                for line in maps:
                    fields = line.split(None, 5)
                    if len(fields) < 6:
                        continue
                    major, minor = (int(x, 16) for x in fields[3].split(b":"))
                    key = (os.makedev(major, minor), int(fields[4]))
                    if key[0] in devices and key in keys:
                        found.setdefault(key, set()).add(pid)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if not target.startswith("/") or target.startswith(("/dev/pts", "/dev/null")):
                        continue
                    stat = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                key = (stat.st_dev, stat.st_ino)
                if key in keys:
                    found.setdefault(key, set()).add(pid)
            seen += 1
        except PermissionError:
            unreadable += 1  # another user's, and this process is not root
        except (OSError, ValueError):
            continue  # gone meanwhile
    return found, True, seen, unreadable


def _glob(path: str) -> str:
    """``path`` for a shell: the literal part quoted where it needs it (``'/dev/shm/(null)_'*``), the final ``*``
    left to expand."""
    if path.endswith("*"):
        return shlex.quote(path[:-1]) + "*"
    return shlex.quote(path)


def _whose(s: Segment) -> str:
    if s.holders:
        return "in use by pid " + ", ".join(str(p) for p in s.holders[:3])
    if s.creator is not None:
        return f"creator pid {s.creator} {'running, not mapping it' if s.creator_alive else 'not running'}"
    return "held by no process here"


FAMILY = re.compile(r"^([^._-]{2,}[._-])")  # a name's leading word and its separator: psm_, sem., psm3_, mlc-


def _pattern(name: str) -> str:
    """A glob for the family a stale name belongs to: torch_4242_* for one dead creator, else its leading word:
    psm_*, sem.*, psm3_* (libfabric's psm3_shm.<uid>...), PostgreSQL.*; the name itself when it has none."""
    base = os.path.basename(name)
    match = TORCH.match(base)
    if match:
        return os.path.join(os.path.dirname(name), f"torch_{match.group(1)}_*")
    family = FAMILY.match(base)
    return os.path.join(os.path.dirname(name), family.group(1) + "*") if family else name


def _size(nbytes: int) -> str:
    return format_value(float(nbytes), "B")
