"""host/stuck.py and host/orphans.py read what a stuck thread waits on from a /proc tree; here a fake one, so each
way of naming the file (a descriptor, a path, a path relative to a directory or the cwd) is known. The real kernel
case (a FUSE request that never answers) is tests/test_runner_stuck.py."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from preflight import runner
from preflight.host import orphans, stuck

NUMBERS = {name: number for number, name in stuck.SYSCALLS.get(platform.machine(), {}).items()}
pytestmark = pytest.mark.skipif(not NUMBERS, reason=f"no system call table for {platform.machine()}")


def process(proc: Path, pid: int, *, state: str = "D", pgrp: int = 0, syscall: str = "", wchan: str = "",
            fds: dict[int, str] | None = None, cwd: str = "/", memory: dict[int, bytes] | None = None,
            start: int = 4242) -> None:
    """A fake /proc/PID with one thread (TID = PID): its stat, wchan, syscall, fds, cwd and memory."""
    task = proc / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    fields = f"{pid} (python3) {state} 1 {pgrp or pid} {pgrp or pid} 0 -1 " + " ".join(["0"] * 13) + f" {start} 0"
    for where in (proc / str(pid), task):
        (where / "stat").write_text(fields)
    (task / "wchan").write_text(wchan)
    (task / "syscall").write_text(syscall)
    (task / "fd").mkdir()  # read through the thread: the main thread's go when SIGKILL ends it
    for fd, target in (fds or {}).items():
        os.symlink(target, task / "fd" / str(fd))
    os.symlink(cwd, task / "cwd")
    (proc / str(pid) / "cmdline").write_bytes(b"python3\0-m\0preflight.worker\0/tmp/w.log\0")
    with open(task / "mem", "wb") as mem:
        for address, data in (memory or {}).items():
            mem.seek(address)
            mem.write(data)


def call(name: str, *args: int) -> str:
    values = [*args, *[0] * (6 - len(args))]
    return f"{NUMBERS[name]} " + " ".join(hex(v) for v in values) + " 0x7ffc0000 0x7f0000"


def test_a_read_names_its_descriptors_file(tmp_path):
    process(tmp_path, 10, syscall=call("pread64", 7, 0x5000, 4096, 0), wchan="request_wait_answer",
            fds={7: "/data/remote/big.bin", 3: "pipe:[123]"})
    (found,) = stuck.blocked([10], proc=str(tmp_path))
    assert (found.syscall, found.path, found.wchan) == ("pread64", "/data/remote/big.bin", "request_wait_answer")
    assert found.where() == "pread64 in process 10, kernel request_wait_answer"


def test_a_stat_names_its_path_from_memory_relative_to_its_directory_or_cwd(tmp_path):
    at_fdcwd = 0xFFFFFFFFFFFFFF9C  # -100 as the kernel prints an unsigned long
    process(tmp_path, 11, syscall=call("newfstatat", at_fdcwd, 0x2FFA, 0x7000, 0x100), cwd="/data",
            memory={0x2FFA: b"remote/hung\0junk"})  # the string crosses a page boundary: read page by page
    process(tmp_path, 12, syscall=call("openat", 9, 0x3000, 0), fds={9: "/data/remote"},
            memory={0x3000: b"hung/x.jpg\0"})
    process(tmp_path, 13, syscall=call("newfstatat", at_fdcwd, 0x3000, 0, 0), memory={0x3000: b"/abs/path\0"})
    found = {b.pid: b for b in stuck.blocked([11, 12, 13], proc=str(tmp_path))}
    assert found[11].path == "/data/remote/hung"
    assert found[12].path == "/data/remote/hung/x.jpg"
    assert found[13].path == "/abs/path"


def test_without_a_named_file_the_newest_open_file_is_named_and_the_log_is_not(tmp_path):
    process(tmp_path, 14, syscall="running", fds={3: "/data/a.bin", 5: "/data/remote/b.bin", 6: "/tmp/worker.log",
                                                  7: "/dev/null"})
    (found,) = stuck.blocked([14], ignore=("/tmp/worker.log",), proc=str(tmp_path))
    assert (found.syscall, found.path) == ("", "/data/remote/b.bin")


def test_only_the_states_asked_for_and_only_the_group_asked_for(tmp_path):
    process(tmp_path, 20, state="S", pgrp=20)
    process(tmp_path, 21, state="D", pgrp=20)
    process(tmp_path, 22, state="Z", pgrp=20)  # a zombie is dead: not left
    process(tmp_path, 23, state="D", pgrp=99)
    assert stuck.group(20, proc=str(tmp_path)) == [20, 21]
    assert [b.pid for b in stuck.blocked([20, 21], proc=str(tmp_path))] == [21]
    assert [b.pid for b in stuck.blocked([20, 21], "DS", proc=str(tmp_path))] == [21, 20]  # D first


def test_a_killed_process_whose_one_thread_sleeps_in_d_is_still_in_its_group(tmp_path):
    """SIGKILL ends the main thread (shown Z) but not a thread in D: the process lives on, unreapable."""
    process(tmp_path, 50, state="Z", pgrp=50)
    thread = tmp_path / "50" / "task" / "51"
    thread.mkdir()
    (thread / "stat").write_text("51 (python3) D 1 50 50 0 -1 " + " ".join(["0"] * 15))
    (thread / "syscall").write_text(call("pread64", 8, 0, 4096, 0))
    (thread / "fd").mkdir()
    os.symlink("/data/remote/big.bin", thread / "fd" / "8")
    process(tmp_path, 52, state="Z", pgrp=50)  # a plain zombie: dead
    assert stuck.group(50, proc=str(tmp_path)) == [50]
    (found,) = stuck.blocked([50], proc=str(tmp_path))
    assert (found.pid, found.tid, found.path) == (50, 51, "/data/remote/big.bin")


def test_the_mount_is_the_longest_prefix_by_name(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "40 22 0:52 / /data/remote rw,nosuid - fuse.sshfs user@host:/export rw\n"
        "41 22 0:53 / /data/rem\\040ote rw - nfs4 server:/x rw\n")
    assert stuck.mount_of("/data/remote/hung/x", str(mountinfo)) == ("/data/remote", "fuse.sshfs", "user@host:/export",
                                                                     "0:52")
    assert stuck.mount_of("/data/rem ote/y", str(mountinfo)).fstype == "nfs4"
    assert stuck.mount_of("/data/remoteX", str(mountinfo)).mount_point == "/"
    fuse = stuck.mount_of("/data/remote/hung/x", str(mountinfo)).advice()
    assert "/sys/fs/fuse/connections/52/abort" in fuse and "a longer `timeout` will not help" in fuse
    assert "check its server (server:/x)" in stuck.mount_of("/data/rem ote/y", str(mountinfo)).advice()


def test_a_check_killed_while_in_uninterruptible_io_names_it_and_does_not_only_say_raise_timeout(tmp_path):
    blocked = stuck.Blocked(30, 30, "D", "rpc_wait_bit_killable", "newfstatat", "/nonexistent-mount/x/y")
    text = runner._timed_out(5, [blocked])
    assert text.startswith("timed out after 5s and was killed; at the timeout it was in uninterruptible I/O at "
                           "/nonexistent-mount/x/y (newfstatat in process 30, kernel rpc_wait_bit_killable)")
    assert "if its server or daemon is gone, a longer one will not help" in text
    assert runner._timed_out(5, []) == ("timed out after 5s and was killed; raise `timeout` in thresholds.yaml if "
                                        "the node is slow")


def test_an_orphan_is_live_only_while_the_same_process_is_stuck_and_blocks_only_paths_that_reach_it(tmp_path):
    proc = tmp_path / "proc"
    process(proc, 40, start=777)
    process(proc, 41, state="S", start=778)
    stuck_one = orphans.Orphan(40, "777", "/data/remote/hung/x", "storage", "2026-12-02T19:00:00Z")
    assert stuck_one.alive(str(proc))
    assert not stuck_one._replace(start="1").alive(str(proc))  # a reused pid
    assert not stuck_one._replace(pid=41, start="778").alive(str(proc))  # no longer in D
    assert not stuck_one._replace(pid=49).alive(str(proc))  # gone
    (proc / "40" / "cmdline").write_bytes(b"sleep\0infinity\0")
    assert not stuck_one.alive(str(proc))  # not preflight's worker: the record file is everyone's to write
    assert stuck_one.blocks("/data") and stuck_one.blocks("/data/remote/hung")
    assert not stuck_one.blocks("/elsewhere")
    assert not stuck_one.blocks("/data/remote/other")  # on this node's root filesystem: not the same dead mount


def test_orphans_are_remembered_beside_the_lock_and_dead_ones_dropped(tmp_path):
    lock = str(tmp_path / "preflight.lock")
    me = orphans.Orphan(os.getpid(), orphans.start_time(os.getpid()), "/x", "storage", "now")
    gone = me._replace(pid=2**22 + 7)
    orphans.remember(lock, [me, gone])
    assert len(Path(lock + orphans.SUFFIX).read_text().splitlines()) == 2
    assert orphans.live(lock) == []  # this process runs, but is not in D: nothing it holds is stuck
    assert Path(lock + orphans.SUFFIX).read_text() == ""
