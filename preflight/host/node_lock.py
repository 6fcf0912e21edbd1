"""One measuring run per node at a time: a file lock every preflight run on the node takes (host layer: the node).

``runner.run`` holds an exclusive ``flock(2)`` (``PREFLIGHT_LOCK``, waited for up to ``PREFLIGHT_LOCK_WAIT``) from its
first measurement to its last. flock, not fcntl: it goes with its holder however it dies; close-on-exec, so a worker
stuck on a dead mount cannot keep it (issue 33 case 4). docs/fleet.md, docs/faults-and-noise.md.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
import time
from datetime import datetime, timezone
from typing import Callable, Mapping, NamedTuple

from preflight.errors import UsageError
from preflight.units import Dimension, UnitError, format_value, parse_quantity

PATH_VARIABLE = "PREFLIGHT_LOCK"
WAIT_VARIABLE = "PREFLIGHT_LOCK_WAIT"
DEFAULT_WAIT_S = 600.0
DEFAULT_PLACES = ("/dev/shm", "/run/lock")  # then tempfile.gettempdir()
FILE_NAME = "preflight.lock"
POLL_S = 0.2  # between tries while another run holds the lock
RECORD_GRACE_S = 2.0  # how long a run that just took the lock may take to write its record before it is unnamed
WAITED = "measured alone, after waiting"  # starts the note of a run that waited (``Wait.note``)
# Starts the reason of every metric unmeasured for want of the lock; the Slurm health check reads it.
BUSY = "another preflight run held the node's measuring lock"


class Settings(NamedTuple):
    """Where the lock is and how long to wait for it."""

    path: str  # the lock file; "" for the first default place that works, "off" for no lock
    wait_s: float


class Wait(NamedTuple):
    """How this run got the lock: after ``waited_s`` seconds, behind ``holder`` ("" when it was free)."""

    waited_s: float
    holder: str

    @property
    def note(self) -> str:
        """What the report says of a run that waited (the console says it once, above its table); "" when it did not
        wait. ``holder`` is every run it waited for, as the stderr lines named them."""
        if not self.holder:
            return ""
        return (f"{WAITED} {format_value(round(self.waited_s, 1), 's')} for {self.holder} to finish "
                f"measuring this node")


class Busy(Exception):
    """The lock stayed held for the whole wait; the message is the reason for every unmeasured metric."""


def settings(environ: Mapping[str, str] = os.environ) -> Settings:
    """Read ``PREFLIGHT_LOCK`` and ``PREFLIGHT_LOCK_WAIT``.

    Raises:
        UsageError: the wait is not a positive duration; the message names the variable and the fix.
    """
    wait_s = DEFAULT_WAIT_S
    if environ.get(WAIT_VARIABLE):
        text = environ[WAIT_VARIABLE]
        try:
            wait_s = parse_quantity(text, Dimension.DURATION)
        except UnitError as error:
            raise UsageError(f"{WAIT_VARIABLE}={text}: {error}") from None
        if wait_s <= 0:
            raise UsageError(f"{WAIT_VARIABLE}={text}: the wait must be positive, like `600s`")
    return Settings(environ.get(PATH_VARIABLE, ""), wait_s)


class NodeLock:
    """The open lock file (or none, with ``PREFLIGHT_LOCK=off``); ``acquire`` once, ``close`` after."""

    def __init__(self, fd: int | None, path: str, wait_s: float, unplaced: str = "") -> None:
        self.fd, self.path, self.wait_s = fd, path, wait_s
        self.unplaced = unplaced  # why no default place could hold the lock: this run measures without it

    @classmethod
    def open(cls, chosen: Settings) -> NodeLock:
        """Open (creating it if need be) the lock file ``chosen`` names, or the first default place that works; where
        none works and none was named, the run measures without the lock and ``acquire`` says why.

        Raises:
            UsageError: ``PREFLIGHT_LOCK`` names a file that cannot be opened; one line naming the path, the error and
                the fix.
        """
        if chosen.path == "off":
            return cls(None, "off", chosen.wait_s)
        if chosen.path:
            try:
                return cls(_open(chosen.path), chosen.path, chosen.wait_s)
            except OSError as error:
                raise UsageError(f"{PATH_VARIABLE}={chosen.path}: cannot open the node's measuring lock "
                                 f"({error.strerror}): name a file in a directory every preflight run on this node "
                                 f"shares and can write (/dev/shm, /run), or set {PATH_VARIABLE}=off") from None
        tried = []
        for directory in _default_places():
            path = os.path.join(directory, FILE_NAME)
            try:
                return cls(_open(path), path, chosen.wait_s)
            except OSError as error:
                tried.append(f"{path} ({error.strerror})")
        # Nobody asked for the lock here: a read-only root with a read-only /dev/shm still measures, and says so.
        return cls(None, "", chosen.wait_s, unplaced=f"no place for the node's measuring lock ({', '.join(tried)}): "
                   f"measuring without it; set {PATH_VARIABLE}=PATH to a file every preflight run on this node can "
                   f"open")

    def acquire(self, what: str, say: Callable[[str], None] = lambda line: None) -> Wait:
        """Take the lock, waiting at most ``wait_s``; then record ``what`` holds it (pid, host, since when). ``say``
        gets one line before a wait starts.

        Raises:
            Busy: still held after ``wait_s``; the message names the holder and the fix.
        """
        if self.fd is None:
            if self.unplaced:
                say(f"preflight: {self.unplaced}")
            return Wait(0.0, "")
        start = time.monotonic()
        said: list[str] = []  # each holder named on stderr, in order: the note names the same ones
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            waited = time.monotonic() - start
            detailed = self._holder(detailed=True, known_by=start + RECORD_GRACE_S)
            holder = detailed.split(" (", 1)[0]
            if holder and holder not in said:
                said.append(holder)
                say(f"preflight: waiting up to {format_value(self.wait_s, 's')} ({WAIT_VARIABLE}) for {detailed} "
                    f"to finish measuring this node (lock {self.path})" if len(said) == 1 else
                    f"preflight: {detailed} took the node's measuring lock first; still waiting")
            if waited >= self.wait_s:
                raise Busy(f"{BUSY} ({self.path}) for all of {WAIT_VARIABLE}={format_value(self.wait_s, 's')}: "
                           f"{self._holder(detailed=True)} was still measuring; run again when it is done, or "
                           f"raise {WAIT_VARIABLE}")
            time.sleep(POLL_S)
        self._record(what)
        return Wait(time.monotonic() - start, ", then ".join(said))

    def close(self) -> None:
        """Release the lock (closing the file releases the flock)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _record(self, what: str) -> None:
        """Write who holds the lock into the file, for a waiting run to name; skipped where it is read-only."""
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since, "what": what})
        data = record.encode() + b"\n"
        try:  # written over the last holder's, then cut: its first line is always one whole record
            os.pwrite(self.fd, data, 0)  # type: ignore[arg-type]
            os.ftruncate(self.fd, len(data))  # type: ignore[arg-type]
        except OSError:
            pass

    def _holder(self, detailed: bool = False, known_by: float = 0.0) -> str:
        """The holder as its record names it (``pid 812 on node-3``; ``detailed`` adds what it runs and since when). A
        record naming a dead process of this host is the previous run's, not yet overwritten: until ``known_by``
        (monotonic) it is "" (ask again), after it "another preflight run" (issue 35)."""
        try:
            record = json.loads(os.pread(self.fd, 4096, 0).split(b"\n")[0] or b"{}")  # type: ignore[arg-type]
            pid, host = int(record["pid"]), str(record["host"])
            if host == socket.gethostname() and not _running(pid):
                raise LookupError(pid)
            who = f"pid {pid} on {host}"
            return f"{who} ({record['what']}, since {record['since']})" if detailed else who
        except (OSError, ValueError, KeyError, TypeError, LookupError):
            return "" if time.monotonic() < known_by else "another preflight run"


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists here (signal 0 checks without sending; EPERM: it exists, another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _default_places() -> list[str]:
    """/dev/shm, /run/lock, then Python's temporary directory when there is one."""
    try:
        return [*DEFAULT_PLACES, tempfile.gettempdir()]
    except FileNotFoundError:  # no writable TMPDIR, /tmp or /var/tmp (a read-only root filesystem)
        return list(DEFAULT_PLACES)


def _open(path: str) -> int:
    """Open ``path`` for the lock, read-write and creatable by every user, else read-only (the flock still works); an
    existing file without O_CREAT, which ``fs.protected_regular`` refuses in a sticky /dev/shm."""
    for flags in (os.O_RDWR, os.O_RDONLY):
        try:
            return os.open(path, flags | os.O_CLOEXEC)
        except PermissionError:
            continue
        except FileNotFoundError:
            break
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        os.fchmod(fd, 0o666)  # the umask must not keep other users' runs out of the lock
    except OSError:
        pass
    return fd
