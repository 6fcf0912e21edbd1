"""A FUSE mount whose server is gone, built for real in a test: requests under some names never answer.

A read-only passthrough of a folder, except that every request the daemon gets for a ``hang`` name or
anything under it (``getattr``, which answers the kernel's lookup and stat, ``readdir``, ``open``,
``read``, or only the ``ops`` asked for; ``statfs``, when asked for, hangs for the whole mount) waits
on an Event and never replies, as a hard NFS mount whose server died or a FUSE daemon that locked up
does: a process that touches it sleeps in the kernel, and
after a SIGKILL sleeps on uninterruptibly (state D) until the request is answered or the connection
aborted (giampaolo/psutil#1931, lxc/lxd#3664). The root and the other names answer, so a dataset can
hold one such folder among healthy ones. (``tests/fusefs.py`` hangs only reads of whole files; here a
stat or a listing hangs too, as on a dead mount.)

``mounted(root, hang=("remote",))`` runs the daemon in its own process (``python tests/fuse_hang.py``),
waits for the mount, yields the mount point, and at the end releases every blocked request (the Event
is set when the daemon's stdin closes: each answers EIO), unmounts lazily (``fusermount -u -z``),
aborts the connection (/sys/fs/fuse/connections/N/abort, where fusectl is mounted) and kills the
daemon, whose death aborts the connection too: no process stays stuck after the test.
``available()`` says why a test must skip: not root, no /dev/fuse, no fusermount, libfuse2 or fusepy.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Iterator, Sequence

if __name__ != "__main__":  # the daemon runs this file as a script, where ``tests`` is no package on its path
    from tests.fusefs import available  # noqa: F401  one answer to "can FUSE mount here?", for its tests

OPS = ("getattr", "readdir", "open", "read")  # the default; "statfs" (the whole mount's, as df asks) only when named


@contextlib.contextmanager
def mounted(root: str, hang: Sequence[str], ops: Sequence[str] = OPS, at: str = "") -> Iterator[str]:
    """Mount ``root`` read-only where requests ``ops`` under the names ``hang`` never answer; yield the mount point.

    ``at``: an empty directory to mount on (a folder inside a dataset); default, a new one under /tmp,
    removed afterwards.

    Raises:
        RuntimeError: the daemon did not mount within 20 s (its stderr's tail says why).
    """
    mount_point = at or tempfile.mkdtemp(prefix="preflight-fuse-hang-")
    command = [sys.executable, os.path.abspath(__file__), root, mount_point, "--hang", ",".join(hang),
               "--ops", ",".join(ops)]
    daemon = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    connection = None
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mount_point):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the FUSE daemon did not mount {mount_point}: "
                                   f"{daemon.stderr.read().decode()[-500:] if daemon.poll() is not None else ''}")
            time.sleep(0.05)
        connection = os.minor(os.stat(mount_point).st_dev)  # the root answers; read now, never at cleanup
        yield mount_point
    finally:
        assert daemon.stdin is not None
        with contextlib.suppress(OSError):
            daemon.stdin.close()  # sets the Event: every blocked request answers EIO
        subprocess.run(["fusermount", "-u", "-z", mount_point], stderr=subprocess.DEVNULL, timeout=30)
        if connection is not None:
            with contextlib.suppress(OSError):
                with open(f"/sys/fs/fuse/connections/{connection}/abort", "w") as handle:
                    handle.write("1")
        daemon.kill()  # closing /dev/fuse aborts the connection: whatever still waits gets ENOTCONN
        daemon.wait(timeout=30)
        if not at:
            with contextlib.suppress(OSError):
                os.rmdir(mount_point)


def _serve(root: str, mount_point: str, hang: set[str], ops: set[str]) -> None:
    import fuse

    released = threading.Event()  # set only when stdin closes (the test's cleanup)

    def release_at_eof() -> None:
        sys.stdin.buffer.read()
        released.set()

    threading.Thread(target=release_at_eof, daemon=True).start()

    class Gone(fuse.Operations):
        def _real(self, path: str) -> str:
            return os.path.join(root, path.lstrip("/"))

        def _maybe_hang(self, op: str, path: str) -> None:
            name = path.strip("/")
            if op in ops and any(name == h or name.startswith(h + "/") for h in hang):
                released.wait()
                raise fuse.FuseOSError(errno.EIO)

        def getattr(self, path: str, fh: int | None = None) -> dict:
            self._maybe_hang("getattr", path)
            st = os.lstat(self._real(path))
            return {key: getattr(st, key) for key in ("st_mode", "st_size", "st_uid", "st_gid", "st_nlink",
                                                      "st_atime", "st_mtime", "st_ctime")}

        def readdir(self, path: str, fh: int) -> list[str]:
            self._maybe_hang("readdir", path)
            return [".", "..", *os.listdir(self._real(path))]

        def open(self, path: str, flags: int) -> int:
            self._maybe_hang("open", path)
            return os.open(self._real(path), os.O_RDONLY)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            self._maybe_hang("read", path)
            return os.pread(fh, size, offset)

        def statfs(self, path: str) -> dict:
            if "statfs" in ops:  # statfs is the mount's, whatever the path: df and statvfs hang on any of it
                released.wait()
                raise fuse.FuseOSError(errno.EIO)
            st = os.statvfs(root)
            return {key: getattr(st, key) for key in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                      "f_files", "f_ffree", "f_favail", "f_namemax")}

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

    fuse.FUSE(Gone(), mount_point, foreground=True, ro=True, nothreads=False, fsname=f"gone:{root}",
              subtype="gone")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("mount_point")
    parser.add_argument("--hang", default="")
    parser.add_argument("--ops", default=",".join(OPS))
    given = parser.parse_args()
    _serve(given.root, given.mount_point, {n for n in given.hang.split(",") if n},
           {o for o in given.ops.split(",") if o})
