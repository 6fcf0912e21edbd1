"""A FUSE filesystem with a fault, mounted for real in a test: a read-only passthrough of a folder.

The shapes of remote stores behind a local client (s3fs, gcsfuse, mountpoint-s3, Alluxio, JuiceFS):
- ``first_read_ms`` / ``first_read_mb_s``: the first read of each file costs that latency plus its size at
  that bandwidth (the remote fetch, of the whole file, as s3fs's use_cache and gcsfuse's file cache fetch it: a
  read of the same file arriving meanwhile waits for it); every later read is served from the daemon's own cache,
  below the kernel's page cache, where neither O_DIRECT nor fadvise DONTNEED can reach; with ``fetch_chunk``
  (bytes) a file is fetched in chunks of that size instead, each at its first read (gcsfuse's and mountpoint-s3's
  ranged reads, an EBS volume restored from a snapshot loading its blocks lazily): a stream that reads each byte
  once pays for every chunk, a second read of a chunk is served from the cache;
- ``eio``: file names (relative to the root) whose reads fail with EIO, while ``access()`` and ``stat()``
  succeed, as a disk's bad sector or a store's lost object shows;
  with ``eio_after`` (bytes), only their reads at that offset or beyond fail: the file opens and its first bytes
  (a header, an .npy's magic) read, as a bad sector or a lost chunk part way through it shows;
- ``hang``: names whose reads never answer, as a hard mount whose server is gone;
- ``bucket_mb_s`` / ``bucket_burst_mb``: a token bucket on read bandwidth, shared by every file and thread, as a
  client's bandwidth limit with a burst (rclone's ``--bwlimit`` on golang.org/x/time/rate, gcsfuse's
  ``--limit-bytes-per-sec`` over its 8-hour window, Guava's SmoothBursty behind Flink's file system): each read takes
  its bytes in tokens; the bucket starts full with ``bucket_burst_mb`` MB and refills at ``bucket_mb_s`` MB/s up
  to that; a read that finds too few reserves them anyway and waits until the refill has paid them (WaitN), so
  reads are served in arrival order and a reader that sat idle gets up to the burst at once, then the rate.

``rereads(mount_point)`` lists the files read again after their first fetch: what the daemon served from its
own cache. A gate that reads like the job's first epoch leaves it empty.

``mounted(root, **faults)`` runs the daemon in its own process (``python tests/fusefs.py``), waits for the
mount, yields the mount point, and unmounts it (lazily, aborting the connection so no reader stays stuck).
``available()`` says why a test must skip: not root, no /dev/fuse, no libfuse2 or fusepy.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Iterator, Sequence


def available() -> str:
    """Why a FUSE filesystem cannot be mounted here ("" when it can)."""
    if os.geteuid() != 0:
        return "mounting FUSE needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount") is None:
        return "no fusermount: apt-get install fuse"
    try:
        import fuse  # noqa: F401  fusepy loads libfuse.so.2 when imported
    except (ImportError, OSError, EnvironmentError) as error:
        return f"fusepy cannot load libfuse2 ({error}): pip install fusepy; apt-get install libfuse2"
    return ""


@contextlib.contextmanager
def mounted(root: str, first_read_ms: float = 0.0, first_read_mb_s: float = 0.0, eio: Sequence[str] = (),
            hang: Sequence[str] = (), fetch_chunk: int = 0, eio_after: int = 0, bucket_mb_s: float = 0.0,
            bucket_burst_mb: float = 0.0) -> Iterator[str]:
    """Mount ``root`` read-only with the faults asked for; yield the mount point."""
    mount_point = tempfile.mkdtemp(prefix="preflight-fuse-")
    command = [sys.executable, os.path.abspath(__file__), root, mount_point, "--first-read-ms", str(first_read_ms),
               "--rereads", _reread_log(mount_point),
               "--first-read-mb-s", str(first_read_mb_s), "--eio", ",".join(eio), "--hang", ",".join(hang),
               "--fetch-chunk", str(fetch_chunk), "--eio-after", str(eio_after), "--bucket-mb-s", str(bucket_mb_s),
               "--bucket-burst-mb", str(bucket_burst_mb)]
    log = tempfile.TemporaryFile()  # not a pipe: a daemon whose unread pipe filled would stop answering
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mount_point):
            if daemon.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"the FUSE daemon did not mount {mount_point}: {log.read().decode()[-500:]}")
            time.sleep(0.05)
        yield mount_point
    finally:
        _abort(mount_point)
        subprocess.run(["fusermount", "-u", "-z", mount_point], stderr=subprocess.DEVNULL)
        daemon.kill()
        daemon.wait(timeout=10)
        log.close()
        with contextlib.suppress(OSError):
            os.rmdir(mount_point)
        with contextlib.suppress(OSError):
            os.unlink(_reread_log(mount_point))


def _reread_log(mount_point: str) -> str:
    return mount_point.rstrip("/") + ".rereads"


def rereads(mount_point: str) -> list[str]:
    """The files (relative names) the daemon served from its own cache: read again after their first fetch."""
    try:
        with open(_reread_log(mount_point), encoding="utf-8") as handle:
            return sorted(set(handle.read().split()))
    except FileNotFoundError:
        return []


def _abort(mount_point: str) -> None:
    """Abort the mount's FUSE connection: a reader stuck on it gets ENOTCONN instead of waiting forever."""
    with contextlib.suppress(OSError):
        device = os.stat(mount_point).st_dev
        with open(f"/sys/fs/fuse/connections/{os.minor(device)}/abort", "w") as handle:
            handle.write("1")


class Bucket:
    """A token bucket of ``burst`` bytes, full at the start, refilled at ``rate`` bytes/s; thread-safe."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> None:
        """Take ``nbytes`` tokens; where too few are left, reserve them (the balance goes below 0) and wait until
        the refill has paid the debt: later takers wait behind this one."""
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate) - nbytes
            self.stamp = now
            wait = -self.tokens / self.rate if self.tokens < 0 else 0.0
        if wait:
            time.sleep(wait)


def _serve(root: str, mount_point: str, first_read_s: float, mb_s: float, eio: set[str], hang: set[str],
           reread_log: str, chunk: int = 0, eio_after: int = 0, bucket: Bucket | None = None) -> None:
    import fuse

    never = threading.Event()  # set by no one: a hung read waits until the connection is aborted

    class Faulty(fuse.Operations):
        def __init__(self) -> None:
            self.fetched: set[str] = set()  # files read at least once
            self.cached: dict[object, threading.Event] = {}  # the daemon's own cache: a file, or (file, chunk)
            self.lock = threading.Lock()

        def _real(self, path: str) -> str:
            return os.path.join(root, path.lstrip("/"))

        def getattr(self, path: str, fh: int | None = None) -> dict:
            try:
                st = os.lstat(self._real(path))
            except OSError as error:
                raise fuse.FuseOSError(error.errno) from None
            return {key: getattr(st, key) for key in ("st_mode", "st_size", "st_uid", "st_gid", "st_nlink",
                                                      "st_atime", "st_mtime", "st_ctime")}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._real(path))]

        def open(self, path: str, flags: int) -> int:
            return os.open(self._real(path), os.O_RDONLY)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            name = path.lstrip("/")
            if name in hang:
                never.wait()
            if name in eio and offset >= eio_after:
                raise fuse.FuseOSError(errno.EIO)
            with self.lock:
                first = name not in self.fetched
                self.fetched.add(name)
                keys = ([(name, c) for c in range(offset // chunk, (offset + max(size, 1) - 1) // chunk + 1)]
                        if chunk else [name])
                mine = [key for key in keys if key not in self.cached]  # what this read fetches from the store
                for key in mine:
                    self.cached[key] = threading.Event()
                waits = [self.cached[key] for key in keys]
                if not first and offset == 0:  # a new read of the file from its start: served from this cache
                    with open(reread_log, "a", encoding="utf-8") as log:
                        log.write(name + "\n")
            if mine and (first_read_s or mb_s):
                fetched = len(mine) * chunk if chunk else os.fstat(fh).st_size
                time.sleep(first_read_s + (fetched / (mb_s * 1e6) if mb_s else 0.0))
            for key in mine:
                self.cached[key].set()
            for done in waits:  # a read during a fetch of its bytes waits for it, as it would for the remote store
                done.wait()
            data = os.pread(fh, size, offset)
            if bucket is not None:
                bucket.take(len(data))
            return data

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

    fuse.FUSE(Faulty(), mount_point, foreground=True, ro=True, nothreads=False, allow_other=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("mount_point")
    parser.add_argument("--first-read-ms", type=float, default=0.0)
    parser.add_argument("--first-read-mb-s", type=float, default=0.0)
    parser.add_argument("--eio", default="")
    parser.add_argument("--hang", default="")
    parser.add_argument("--rereads", default=os.devnull)
    parser.add_argument("--fetch-chunk", type=int, default=0)
    parser.add_argument("--eio-after", type=int, default=0)
    parser.add_argument("--bucket-mb-s", type=float, default=0.0)
    parser.add_argument("--bucket-burst-mb", type=float, default=0.0)
    given = parser.parse_args()
    names = (lambda text: {n for n in text.split(",") if n})
    _serve(given.root, given.mount_point, given.first_read_ms / 1e3, given.first_read_mb_s, names(given.eio),
           names(given.hang), given.rereads, given.fetch_chunk, given.eio_after,
           Bucket(given.bucket_mb_s * 1e6, given.bucket_burst_mb * 1e6) if given.bucket_mb_s > 0 else None)
