"""The pids limits read from fake cgroup trees (v1 and v2), and the wording of a start the kernel refused.

The real controller is exercised in tests/checks/dataloader/test_pids_limit.py; here each tree is
written so the right answer is known: which cgroup binds, how many tasks are left, and when an
error is a pids limit's at all.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from preflight.host import pids


def tree(root: Path, levels: dict[str, tuple[str, int] | None], v2: bool) -> tuple[Path, Path]:
    """A fake hierarchy: ``levels`` maps a cgroup path to (pids.max, pids.current) or None (no files).

    Returns the root to read and the membership file naming the deepest path as this process's cgroup."""
    hierarchy = root if v2 else root / "pids"
    hierarchy.mkdir(parents=True, exist_ok=True)
    if v2:
        (root / "cgroup.controllers").write_text("cpu memory pids\n")
    for path, files in levels.items():
        directory = hierarchy / path.strip("/")
        directory.mkdir(parents=True, exist_ok=True)
        if files is not None:
            (directory / "pids.max").write_text(f"{files[0]}\n")
            (directory / "pids.current").write_text(f"{files[1]}\n")
            (directory / "pids.events").write_text("max 0\n")
    deepest = max(levels, key=len)
    membership = root / "self-cgroup"
    membership.write_text(f"0::{deepest}\n" if v2 else f"8:pids:{deepest}\n4:memory:/\n")
    return root, membership


@pytest.fixture
def no_proc(tmp_path: Path) -> Path:
    """A /proc with neither loadavg nor kernel limits: only the cgroup's scopes are read."""
    proc = tmp_path / "proc"
    proc.mkdir()
    return proc


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
def test_the_tightest_ancestor_binds_whatever_the_process_own_cgroup_says(tmp_path, no_proc, v2):
    # a Kubernetes pod's limit (40, 30 used: 10 left) above its container's own (100, 5 used: 95 left)
    root, membership = tree(tmp_path / "cg", {"/kubepods/pod1": ("40", 30), "/kubepods/pod1/ctr": ("100", 5),
                                               "/kubepods": ("max", 31)}, v2)
    limits = pids.read(root, membership, no_proc)
    scope = limits.tightest()
    hierarchy = root if v2 else root / "pids"
    assert (scope.name, scope.limit, scope.used, scope.available) == ("pids.max", 40, 30, 10)
    assert scope.file == str(hierarchy / "kubepods/pod1/pids.max")
    assert len(limits.scopes) == 2  # "max" is no limit


def test_no_pids_controller_and_no_proc_reads_no_scope(tmp_path, no_proc):
    membership = tmp_path / "self-cgroup"
    membership.write_text("4:memory:/\n")
    (tmp_path / "cg").mkdir()
    assert pids.read(tmp_path / "cg", membership, no_proc).tightest() is None


def test_the_kernel_limits_are_read_against_the_tasks_scheduled(tmp_path, no_proc):
    (no_proc / "loadavg").write_text("0.10 0.20 0.30 3/1200 4242\n")
    (no_proc / "sys" / "kernel").mkdir(parents=True)
    (no_proc / "sys" / "kernel" / "pid_max").write_text("4096\n")
    (no_proc / "sys" / "kernel" / "threads-max").write_text("100000\n")
    membership = tmp_path / "self-cgroup"
    membership.write_text("")
    scope = pids.read(tmp_path / "none", membership, no_proc).tightest()
    assert (scope.name, scope.limit, scope.used, scope.available) == ("kernel.pid_max", 4096, 1200, 2896)


def test_a_users_tasks_are_the_threads_of_every_process_of_that_real_uid(no_proc):
    for pid, uid, threads in ((10, 1000, 5), (11, 1000, 3), (12, 0, 40), (13, 1001, 7)):
        (no_proc / str(pid)).mkdir()
        (no_proc / str(pid) / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                                    f"Threads:\t{threads}\n")
    (no_proc / "self").mkdir()  # not a pid
    assert pids.user_tasks(1000, no_proc) == 8


def refused(tmp_path: Path, no_proc: Path, error: BaseException, events_after: int = 1,
            current: int = 40) -> str | None:
    root, membership = tree(tmp_path / "cg", {"/job": ("40", 5)}, v2=True)
    before = pids.read(root, membership, no_proc)
    (root / "job" / "pids.events").write_text(f"max {events_after}\n")
    (root / "job" / "pids.current").write_text(f"{current}\n")
    return pids.explain(error, before, "or lower num_workers (8)", root, membership, no_proc)


def test_cant_start_new_thread_under_a_refusing_cgroup_names_the_limit_its_file_and_the_fix(tmp_path, no_proc):
    message = refused(tmp_path, no_proc, RuntimeError("can't start new thread"), current=12)
    assert message == (f"pids limit 40 reached ({tmp_path}/cg/job/pids.max): a thread or process could not start "
                       f"(can't start new thread); 12 tasks in use now: {pids.FIX}, or lower num_workers (8)")


def test_a_refused_fork_is_named_through_the_exception_chain(tmp_path, no_proc):
    try:
        try:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        except OSError as fork:
            raise RuntimeError("pool start failed") from fork
    except RuntimeError as error:
        message = refused(tmp_path, no_proc, error)
    assert message.startswith(f"pids limit 40 reached ({tmp_path}/cg/job/pids.max): ")


def test_a_dead_worker_is_the_pids_limit_only_when_the_cgroup_refused_a_fork(tmp_path, no_proc):
    dead = RuntimeError("DataLoader worker (pid(s) 4242) exited unexpectedly")
    assert refused(tmp_path, no_proc, dead, events_after=3, current=20).startswith("pids limit 40 reached")
    assert refused(tmp_path / "b", no_proc, dead, events_after=0, current=20) is None  # an OOM kill, a segfault


def test_a_limit_reached_now_is_evidence_without_a_refusal_counted(tmp_path, no_proc):
    message = refused(tmp_path, no_proc, RuntimeError("can't start new thread"), events_after=0, current=40)
    assert message.startswith("pids limit 40 reached")


def test_eagain_with_no_limit_reached_keeps_its_own_error(tmp_path, no_proc):
    # a non-blocking read says EAGAIN too; ENOMEM also reads "can't start new thread"
    assert refused(tmp_path, no_proc, BlockingIOError(errno.EAGAIN, "busy"), events_after=0, current=5) is None
    assert refused(tmp_path / "b", no_proc, ValueError("bad value"), events_after=4, current=40) is None


@pytest.mark.parametrize("wanted, spare, got", [
    ((4, 8), None, (4, 8)),  # no limit known: as asked
    ((4, 8), 100, (4, 8)),  # 4 x (8 + 1) = 36 tasks fit
    ((4, 8), 20, (4, 4)),  # threads go first: 4 x (4 + 1) = 20
    ((1, 32), 10, (1, 10)),  # one process: its threads only
    ((4, 8), 0, (1, 1)),  # never nothing: the start then fails with the limit's name
])
def test_a_pool_shrinks_to_the_tasks_the_limit_leaves(wanted, spare, got):
    assert pids.affordable(*wanted, spare) == got
