"""A check stuck on a mount that never answers (issue 33 case 4), built for real: a FUSE daemon that never replies.

One folder of the dataset is a FUSE mount (``tests/fuse_hang.py``) whose requests under ``hung/`` never
answer, as a hard mount whose server is gone. The storage check's worker blocks there; SIGKILL does not
end it (it sleeps uninterruptibly until the request completes). ``preflight run`` must abandon it within
its timeout plus ``runner.STUCK_BOUND_S``, name the file and the mount, not advise a longer timeout,
finish the other checks, write its reports, and leave the node lock free while the worker is still stuck.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from preflight import runner
from preflight.host import node_lock, stuck
from tests import fuse_hang
from tests.fuse_hang import OPS
from tests.helpers import run_cli, write_config

pytestmark = pytest.mark.skipif(bool(fuse_hang.available()), reason=fuse_hang.available() or "FUSE is available")

TIMEOUT_S = 5


def dataset(tmp_path: Path, big: bool) -> tuple[Path, Path, Path]:
    """A dataset folder with two local files and ``remote/`` (empty, to mount on), the tree the mount serves
    (``fine.bin`` and ``hung/``), and a healthy folder for a second storage instance."""
    data, served, local = tmp_path / "data", tmp_path / "served", tmp_path / "local"
    for folder in (data / "remote", served / "hung", local):
        folder.mkdir(parents=True)
    size = (8 << 20) if big else (64 << 10)  # seq_read reads files of 8 MiB or more
    for name in ("a.bin", "b.bin"):
        (data / name).write_bytes(os.urandom(64 << 10))
    (served / "fine.bin").write_bytes(os.urandom(64 << 10))
    for index in range(2):
        (served / "hung" / f"big{index}.bin").write_bytes(os.urandom(size))
    (local / "x.bin").write_bytes(os.urandom(64 << 10))
    return data, served, local


@pytest.mark.parametrize("ops, waits_on", [
    # Every request: the walk's stat of remote/hung never returns (kubelet's lstat, kubernetes/kubernetes#101622).
    (("getattr", "readdir", "open", "read"), "remote/hung"),
    # Only reads: the walk and the facts answer, seq_read's pread never returns (a reader of an S3 FUSE mount stuck
    # in D, deaf to kill -9, kahing/goofys#153).
    (("read",), "remote/hung/big"),
    # Only statfs, as df and node_exporter's filesystem collector hang (prometheus/node_exporter#868,
    # GuillaumeGomez/sysinfo#842): the walk answers, the facts' statvfs of the mount holding the bytes never returns.
    (("statfs",), "remote"),
], ids=["dead-mount", "dead-reads", "dead-statfs"])
def test_a_check_stuck_on_a_mount_that_never_answers_is_abandoned_and_the_run_goes_on(tmp_path, ops, waits_on):
    data, served, local = dataset(tmp_path, big=ops != OPS)
    lock = tmp_path / "node.lock"
    config = write_config(tmp_path, f"""
        version: 1
        checks:
          shm: {{size: {{min: 1 MiB}}}}
          storage: {{path: {data}, timeout: {TIMEOUT_S}s, duration: 1s, seq_read: {{min: 1 MB/s}},
                     free_space: {{min: 1 MiB}}}}
          again: {{check: storage, path: {data}, timeout: {TIMEOUT_S}s, free_space: {{min: 1 MiB}}}}
          local: {{check: storage, path: {local}, free_space: {{min: 1 MiB}}}}
        """)
    json_path, junit_path = tmp_path / "report.json", tmp_path / "report.xml"
    with fuse_hang.mounted(str(served), hang=("hung",), ops=ops, at=str(data / "remote")) as mount_point:
        started = time.monotonic()
        # Today's runner waits for the stuck worker forever: run_cli's 120 s would end this test, not the run.
        done = run_cli("run", "-c", str(config), "--json", str(json_path), "--junit-xml", str(junit_path),
                       env={"PREFLIGHT_LOCK": str(lock)}, timeout=120)
        wall_s = time.monotonic() - started
        results = {r["id"]: r for r in json.loads(json_path.read_text())["results"]}
        storage = [r for key, r in results.items() if key.startswith("storage.")]

        # The stuck worker is still there, in the kernel, after the run ended: the case was real.
        message = storage[0]["message"]
        pid = int(re.search(r"process(?:es)? (\d+)", message)[1])
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        assert state == "D", f"process {pid} is {state}, not stuck: {message}"
        # It never held the node lock, and the lock is free at once for the next run.
        held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert str(lock) not in held, held
        free = node_lock.NodeLock.open(node_lock.Settings(str(lock), 0.5))
        assert free.acquire("the test's next run").holder == ""
        free.close()
        # The next run on the node (a health check every few minutes) does not leave another process stuck
        # beside it (monitoring-plugins/monitoring-plugins#1186): it names the orphan at once, without a timeout.
        later = run_cli("run", "-c", str(config), "--json", str(tmp_path / "later.json"),
                        env={"PREFLIGHT_LOCK": str(lock)}, timeout=120)
        again = {r["id"]: r for r in json.loads((tmp_path / "later.json").read_text())["results"]}
        assert Path(f"/proc/{pid}/stat").exists()

    assert done.returncode == 1, done.stderr[-3000:]
    assert {r["verdict"] for r in storage} == {"error"}, storage
    for row in storage:
        assert row["message"] == message
    assert f"stuck in uninterruptible I/O at {data}/{waits_on}" in message
    assert f"the mount at {mount_point} (fuse.gone, gone:{served}) does not answer" in message
    assert "check the FUSE daemon that serves it" in message and "a longer `timeout` will not help" in message
    assert "raise `timeout`" not in message
    assert "request_wait_answer" in message  # its wchan or kernel stack says where it sleeps
    # Abandoned within the stated bound, and the run did not wait for it either.
    assert storage[0]["duration_s"] <= TIMEOUT_S + runner.STUCK_BOUND_S, storage[0]["duration_s"]
    assert wall_s < 120
    # The other checks ran, before and after it, and measured for real.
    assert results["shm.size"]["verdict"] == "pass" and results["shm.size"]["value"] > 0
    assert results["local.free_space"]["verdict"] == "pass" and results["local.free_space"]["value"] > 0
    # A later instance of this run that reads the same dataset is not started, nor are those of the next run.
    orphan = f"not run: preflight's process {pid} (measuring `storage`, abandoned "
    assert results["again.free_space"]["verdict"] == "error" and orphan in results["again.free_space"]["message"]
    assert results["again.free_space"]["duration_s"] < TIMEOUT_S
    assert later.returncode == 1, later.stderr[-3000:]
    for key in ("storage.seq_read", "storage.free_space", "again.free_space"):
        assert again[key]["verdict"] == "error" and orphan in again[key]["message"], again[key]
        assert f"still stuck in uninterruptible I/O at {data}/{waits_on}" in again[key]["message"]
        assert "a longer `timeout` will not help" in again[key]["message"]
    assert again["local.free_space"]["verdict"] == "pass" and again["shm.size"]["verdict"] == "pass"
    # Every report was written, the stuck row an <error> in JUnit.
    cases = {(c.get("classname"), c.get("name")): c for c in ElementTree.parse(junit_path).iter("testcase")}
    assert "stuck in uninterruptible I/O" in cases["preflight.storage", "seq_read"].find("error").get("message")
    assert cases["preflight.local", "free_space"].find("error") is None
    assert "stuck in uninterruptible I/O" in done.stdout


@pytest.mark.parametrize("code", [
    "import os; os.stat('hung/f')",
    # In a thread: SIGKILL ends the main thread (a zombie to /proc) but not the process, which stays unreapable.
    "import os, threading, time; threading.Thread(target=os.stat, args=('hung/f',)).start(); time.sleep(600)",
], ids=["main-thread", "other-thread"])
def test_the_blocked_call_and_its_path_are_read_from_proc(tmp_path, code):
    """``stuck.blocked`` names a stat stuck on the mount by its path argument, relative to the process's cwd."""
    import signal
    import subprocess
    import sys

    served = tmp_path / "served"
    (served / "hung").mkdir(parents=True)
    (served / "hung" / "f").write_text("x")
    with fuse_hang.mounted(str(served), hang=("hung",)) as mount_point:
        child = subprocess.Popen([sys.executable, "-c", code], cwd=mount_point, start_new_session=True)
        deadline = time.monotonic() + 60
        while not [b for b in stuck.blocked([child.pid], "DS") if b.syscall == "newfstatat"]:
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.05)
        os.killpg(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not stuck.blocked(stuck.group(child.pid)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)  # whatever SIGKILL can end has ended by now
        assert stuck.group(child.pid) == [child.pid] and child.poll() is None
        (found,) = stuck.blocked(stuck.group(child.pid))
        assert (found.pid, found.state, found.path) == (child.pid, "D", f"{mount_point}/hung/f")
        assert found.syscall == "newfstatat" and found.wchan == "request_wait_answer"
        assert stuck.mount_of(found.path)[:2] == (mount_point, "fuse.gone")
    assert child.wait(timeout=60) == -signal.SIGKILL  # released at cleanup, the killed process ends
