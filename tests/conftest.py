"""Fixtures every test directory may use by name."""

from __future__ import annotations

import os
import stat
import sys
from typing import Iterator

import pytest

# Every preflight run takes the node's measuring lock (host/node_lock.py), and the suite runs on several xdist
# workers: their runs would queue behind each other and note the wait. Tests measure without it; the lock's own
# tests (tests/test_node_lock.py, tests/test_slurm.py) name a lock file of their own.
os.environ["PREFLIGHT_LOCK"] = "off"

KMSG = os.makedev(1, 11)  # /dev/kmsg's character device (Documentation/admin-guide/devices.txt), under any name


def _no_kernel_log_writes(event: str, args: tuple[object, ...]) -> None:
    """Refuse every open of the kernel log for writing in a test process (an audit hook: open() and os.open()).

    A line written there stays until reboot: a fake ``NVRM: Xid`` line fails every later ``preflight run`` of
    the xid check on the machine, and a GPU node's other monitors (node-problem-detector, DCGM) would read it as
    a real GPU fault and drain the node. Tests feed the xid check a file of records of their own instead.
    """
    if event != "open" or len(args) < 3 or not isinstance(args[2], int) or not args[2] & (os.O_WRONLY | os.O_RDWR):
        return
    path = args[0]
    if not isinstance(path, (str, bytes, os.PathLike)):
        return
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return
    if stat.S_ISCHR(status.st_mode) and status.st_rdev == KMSG:
        raise PermissionError(f"a test opened the kernel log for writing ({os.fsdecode(path)}): tests must never write "
                              f"the node's real kernel log; give the reader a file of records (kmsg.read(path))")


sys.addaudithook(_no_kernel_log_writes)


@pytest.fixture
def one_intra_op_thread() -> Iterator[None]:
    """One intra-op thread while a test measures: on a shared 2-CPU machine, two threads wait on each other's
    straggler and a step's time swings 2-5x between windows (1 thread: 1100 samples/s steady; 2: 100-600)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The files that take longest, started first: the suite runs on xdist workers a whole file each
# (--dist loadfile), and a long file drawn last leaves the other workers idle while one finishes it.
# Ordered by their wall time on a four-worker idle run (seconds: 156, 134, 130, 108, 107, 84, 67, 67, 48, 38,
# 32, 32, 30, 29, 28, 26; tests/fleet/test_launch.py, added later: 52 on two busy workers). xdist would
# re-sort the files by their number of tests (its --loadscope-reorder, on by default), which puts these
# few-test, long files last: ``pytest_configure`` turns that off.
LONGEST_FIRST = (
    "tests/loading/test_user.py", "tests/fleet/test_orchestrate.py",
    "tests/checks/dataloader/test_counting.py", "tests/checks/test_real_datasets.py", "tests/test_install.py",
    "tests/test_slurm.py", "tests/test_cli.py", "tests/fleet/test_launch.py", "tests/scripts/test_gpu_smoke.py",
    "tests/checks/model/test_model.py",
    "tests/checks/storage/test_where_bytes_are.py",
    "tests/test_runner.py", "tests/loading/test_loop.py", "tests/checks/test_walk_fidelity.py",
    "tests/checks/dataloader/test_dataset_shapes.py", "tests/loading/footprint/test_memory.py",
    "tests/checks/storage/test_storage.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Let xdist hand out the files in collection order (``LONGEST_FIRST``), not by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is installed
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the collected tests longest file first (see ``LONGEST_FIRST``), keeping each file's own order, and
    mark those files ``slow``: ``-m "not slow"`` leaves them out of a quick loop (CI runs them all)."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    for item in items:
        if item.nodeid.split("::", 1)[0] in rank:
            item.add_marker(pytest.mark.slow)
