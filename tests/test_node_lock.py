"""The node's measuring lock: two real runs started together measure one after the other, the one
that waited says so, one that cannot get the lock reports its metrics unmeasurable, and a bad
lock path is one line and exit 2.

Every run here names its own lock file (PREFLIGHT_LOCK in a temporary directory), so these tests
never wait for another preflight run on the machine, nor make one wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from preflight.host import node_lock
from tests.helpers import REPO, in_mount_namespace, in_read_only_root, run_cli, write_config

# Runs ``runner.run`` on a config with the fake `interval` check registered (a real worker process measures it)
# and prints each result's id, verdict and note as JSON.
DRIVER = """
import json, sys
from preflight import config, runner
from preflight.checks import CHECKS
from tests.fakes import interval
CHECKS["interval"] = interval
results = runner.run(config.load(sys.argv[1], environ={}))
print(json.dumps([{"id": r.id, "verdict": r.verdict, "note": r.note} for r in results]))
"""


def environment(lock: Path, **more: str) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PREFLIGHT_"))}
    return dict(inherited, PYTHONPATH=str(REPO), NO_COLOR="1", PREFLIGHT_LOCK=str(lock), **more)


def start_second_once_the_first_holds(lock: Path, command: list[list[str]], **popen) -> list[subprocess.Popen]:
    """Start ``command[0]``, then ``command[1]`` once the lock's record names the first's pid: however slowly the
    first starts on a busy machine, the second finds the lock taken (what the tests are about), not free."""
    first = subprocess.Popen(command[0], **popen)
    deadline = time.monotonic() + 120
    while f'"pid": {first.pid},' not in (lock.read_text() if lock.exists() else ""):
        if first.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the first run never held {lock}: {first.communicate()}")
        time.sleep(0.02)
    return [first, subprocess.Popen(command[1], **popen)]


def test_two_runs_started_together_measure_one_after_the_other(tmp_path: Path) -> None:
    log = tmp_path / "intervals.log"
    config = write_config(tmp_path, f"""
        version: 1
        checks:
          interval: {{log: {log}, hold: 4s, rate: {{min: 1 samples/s}}}}
        """)
    runs = start_second_once_the_first_holds(tmp_path / "lock", [[sys.executable, "-c", DRIVER, str(config)]] * 2,
                                             env=environment(tmp_path / "lock"), stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True)
    outputs = [run.communicate(timeout=120) for run in runs]

    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    intervals = sorted(tuple(float(t) for t in line.split()[1:]) for line in log.read_text().splitlines())
    assert len(intervals) == 2
    (first_start, first_end), (second_start, second_end) = intervals
    assert second_start >= first_end, f"the two measurements overlapped: {intervals}"
    results = [json.loads(out) for out, _ in outputs]
    notes = [result["note"] for run in results for result in run]
    waited = [note for note in notes if note.startswith("measured alone, after waiting")]
    assert len(waited) == 1 and notes.count("") == 1, notes  # one run waited and says so; the other did not wait
    holder = runs[0] if results[1][0]["note"] else runs[1]
    assert f"for pid {holder.pid} on " in waited[0]
    assert all(result["verdict"] == "pass" for run in results for result in run)


def test_two_real_storage_runs_on_one_dataset_one_waits_for_the_other_and_says_so(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.bin").write_bytes(os.urandom(16 << 20))
    config = write_config(tmp_path, f"""
        version: 1
        defaults: {{duration: 1.5s}}
        checks:
          storage:
            path: {data}
            seq_read: {{min: 1 MB/s}}
        """)
    reports = [tmp_path / f"run{n}.json" for n in range(2)]
    runs = start_second_once_the_first_holds(
        tmp_path / "lock", [[sys.executable, "-m", "preflight", "run", "-c", str(config), "--json", str(report)]
                            for report in reports],
        env=environment(tmp_path / "lock"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [run.communicate(timeout=240) for run in runs]

    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    by_run = [{r["id"]: r for r in json.loads(report.read_text())["results"]} for report in reports]
    for results in by_run:
        assert results["storage.seq_read"]["value"] > 1.0 and results["storage.seq_read"]["verdict"] == "pass"
    waited = [n for n, results in enumerate(by_run)
              if results["storage.seq_read"]["note"].startswith("measured alone, after waiting")]
    assert len(waited) == 1, [results["storage.seq_read"]["note"] for results in by_run]
    waiter, holder = runs[waited[0]], runs[1 - waited[0]]
    assert all(r["note"].startswith("measured alone") for r in by_run[waited[0]].values())  # under every row
    assert f"for pid {holder.pid} on " in by_run[waited[0]]["storage.seq_read"]["note"]
    assert f"preflight: waiting up to 600 s (PREFLIGHT_LOCK_WAIT) for pid {holder.pid} on " in outputs[waited[0]][1]
    assert not any("measured alone" in r["note"] for r in by_run[1 - waited[0]].values())
    assert waiter.pid != holder.pid


SHM_ONLY = """
    version: 1
    checks:
      shm:
        size: {min: 1 MiB}
    """


@contextlib.contextmanager
def held(lock: Path) -> Iterator[None]:
    """``lock`` held by this test process (as "the test's own hold") for the block."""
    holder = node_lock.NodeLock.open(node_lock.Settings(str(lock), 1.0))
    holder.acquire("the test's own hold")
    try:
        yield
    finally:
        holder.close()


def test_a_run_that_cannot_get_the_lock_reports_its_metrics_unmeasurable(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    with held(lock):
        completed = run_cli("run", "-c", str(write_config(tmp_path, SHM_ONLY)), "--json", str(tmp_path / "run.json"),
                            env={"PREFLIGHT_LOCK": str(lock), "PREFLIGHT_LOCK_WAIT": "1s"})

    assert completed.returncode == 1, completed.stderr
    result = json.loads((tmp_path / "run.json").read_text())["results"][0]
    assert result["id"] == "shm.size" and result["verdict"] == "fail" and result["value"] is None
    assert result["message"].startswith(f"could not measure: {node_lock.BUSY} ({lock}) for all of PREFLIGHT_LOCK_WAIT=1 s")
    assert f"pid {os.getpid()} on " in result["message"] and "the test's own hold" in result["message"]


@pytest.mark.parametrize("variables, expected", [
    ({"PREFLIGHT_LOCK": "/nonexistent-dir/preflight.lock"},
     "preflight: error: PREFLIGHT_LOCK=/nonexistent-dir/preflight.lock: cannot open the node's measuring lock "
     "(No such file or directory): name a file in a directory every preflight run on this node shares and can "
     "write (/dev/shm, /run), or set PREFLIGHT_LOCK=off"),
    ({"PREFLIGHT_LOCK_WAIT": "soon"}, "preflight: error: PREFLIGHT_LOCK_WAIT=soon: expected a duration like"),
    ({"PREFLIGHT_LOCK_WAIT": "0s"}, "preflight: error: PREFLIGHT_LOCK_WAIT=0s: the wait must be positive, like `600s`"),
])
def test_a_bad_lock_setting_is_one_line_and_exit_2_before_measuring(tmp_path: Path, variables: dict[str, str],
                                                                     expected: str) -> None:
    config = write_config(tmp_path, SHM_ONLY)
    completed = run_cli("run", "-c", str(config), "--json", str(tmp_path / "run.json"), env=variables)

    assert completed.returncode == 2
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith(expected), completed.stderr
    assert "Traceback" not in completed.stderr
    report = json.loads((tmp_path / "run.json").read_text())  # as for a config error: the report says why
    assert report["exit_code"] == 2 and report["results"] == [] and last == f"preflight: error: {report['error']}"


def test_off_runs_without_a_lock_and_a_held_one_does_not_block_it(tmp_path: Path) -> None:
    with held(tmp_path / "lock"):
        completed = run_cli("run", "-c", str(write_config(tmp_path, SHM_ONLY)),
                            env={"PREFLIGHT_LOCK": "off", "PREFLIGHT_LOCK_WAIT": "1s"})
    assert completed.returncode == 0, completed.stderr
    assert "waiting" not in completed.stderr


def test_the_lock_is_released_when_its_holder_is_killed(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from preflight.host import node_lock
node_lock.NodeLock.open(node_lock.Settings({str(lock)!r}, 1.0)).acquire("a doomed run")
print("held", flush=True)
time.sleep(600)
"""], env=environment(lock), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        mine = node_lock.NodeLock.open(node_lock.Settings(str(lock), 0.5))
        with pytest.raises(node_lock.Busy, match="a doomed run"):
            mine.acquire("the test")
        holder.kill()
        holder.wait()
        wait = mine.acquire("the test")  # SIGKILL closed the holder's descriptor, and with it the flock
        mine.close()
    finally:
        holder.kill()
        holder.wait()
    assert wait.holder == ""  # free at the first try: nobody to wait for


def test_a_worker_never_holds_the_lock_so_one_that_outlives_its_run_cannot_keep_it(tmp_path: Path) -> None:
    """A worker stuck in the kernel outlives its run (issue 33 case 4): had it inherited the lock's descriptor, the
    flock would stay held for every later run on the node. Here the run is killed while its worker measures, and the
    worker, orphaned as a stuck one is, holds no descriptor of the lock; the lock is free at once."""
    import signal

    lock = tmp_path / "lock"
    config = write_config(tmp_path, f"""
        version: 1
        checks:
          interval: {{log: {tmp_path / 'intervals.log'}, hold: 60s, timeout: 120s, rate: {{min: 1 samples/s}}}}
        """)
    run = start_second_once_the_first_holds(lock, [[sys.executable, "-c", DRIVER, str(config)]] * 2,
                                            env=environment(lock), stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
    run[1].kill()  # only the first is wanted: the second merely waits for the lock
    run[1].wait()
    worker = 0
    try:
        deadline = time.monotonic() + 120
        while not worker:
            assert time.monotonic() < deadline and run[0].poll() is None, "the run started no worker"
            for pid in filter(str.isdigit, os.listdir("/proc")):
                with contextlib.suppress(OSError):
                    status = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
                    command = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if int(status[1]) == run[0].pid and b"preflight.worker" in command:
                        worker = int(pid)
            time.sleep(0.05)
        held = {os.readlink(f"/proc/{worker}/fd/{fd}") for fd in os.listdir(f"/proc/{worker}/fd")}
        assert str(lock) not in held, held
        run[0].kill()  # the runner dies; its worker lives on, orphaned
        run[0].wait()
        assert Path(f"/proc/{worker}").exists()
        mine = node_lock.NodeLock.open(node_lock.Settings(str(lock), 0.5))
        assert mine.acquire("the next run").holder == ""  # free at the first try
        mine.close()
    finally:
        run[0].kill()
        run[0].wait()
        if worker:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker, signal.SIGKILL)


def test_with_no_place_for_the_lock_a_run_measures_without_it_and_says_so(monkeypatch) -> None:
    """Nobody named a lock file and no default place can hold one (a read-only root, /dev/shm read-only, no
    writable temporary directory): the run still measures, and says why it has no lock, instead of exit 2."""
    monkeypatch.setattr(node_lock, "DEFAULT_PLACES", ("/nonexistent-shm", "/nonexistent-run-lock"))

    def no_temporary_directory() -> str:
        raise FileNotFoundError("No usable temporary directory found")

    monkeypatch.setattr(node_lock.tempfile, "gettempdir", no_temporary_directory)
    lock = node_lock.NodeLock.open(node_lock.Settings("", 1.0))
    said: list[str] = []
    assert lock.acquire("test", say=said.append) == node_lock.Wait(0.0, "")
    assert said == ["preflight: no place for the node's measuring lock (/nonexistent-shm/preflight.lock (No such "
                    "file or directory), /nonexistent-run-lock/preflight.lock (No such file or directory)): measuring "
                    "without it; set PREFLIGHT_LOCK=PATH to a file every preflight run on this node can open"]
    lock.close()


@pytest.mark.parametrize("run_in, expected", [
    (lambda script: in_mount_namespace(script), "off"),
    (lambda script: in_read_only_root(script, shm="read-only"), "off"),
    (lambda script: in_read_only_root(script, shm="private"), "unset"),
], ids=["mount-namespace", "read-only-root-and-shm", "read-only-root-private-shm"])
def test_runs_in_a_tests_mount_namespace_take_the_nodes_lock_only_on_a_private_dev_shm(run_in, expected) -> None:
    """The suite's CI failed once: a run in a mount namespace took the host's /dev/shm/preflight.lock, waited
    9.6 s for another test's run, and its report said so. A namespace shares the host's /dev/shm and /run/lock,
    so runs there measure without the lock, as the rest of the suite does; only a private /dev/shm (no other
    test's) keeps the default place, which the read-only-root tests look for."""
    done = run_in("echo ${PREFLIGHT_LOCK-unset}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_a_stale_record_is_not_named_the_line_and_the_note_name_the_live_holder(tmp_path: Path) -> None:
    """Issue 35: a run takes the lock, then writes its record; a run waiting meanwhile read the record of the
    run before, gone, and its stderr line named that pid while the report's note named the live one."""
    lock = tmp_path / "lock"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    hold = os.open(lock, os.O_RDWR | os.O_CREAT)
    os.pwrite(hold, json.dumps({"pid": gone.pid, "host": socket.gethostname(), "since": "2026-12-02T19:00:00Z",
                                "what": "the run before"}).encode() + b"\n", 0)
    fcntl.flock(hold, fcntl.LOCK_EX)  # the next run holds the lock and has not written its record yet
    said: list[str] = []
    told = threading.Event()

    def holder() -> None:
        time.sleep(0.5)  # a few of the waiter's tries see only the stale record
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "2026-12-02T19:00:05Z",
                             "what": "the live run"}).encode() + b"\n"
        os.pwrite(hold, record, 0)
        os.ftruncate(hold, len(record))
        told.wait(60)
        os.close(hold)  # releases the flock

    thread = threading.Thread(target=holder)
    thread.start()
    waiter = node_lock.NodeLock.open(node_lock.Settings(str(lock), 60.0))
    try:
        wait = waiter.acquire("the test", say=lambda line: (said.append(line), told.set()))
    finally:
        waiter.close()
        told.set()
        thread.join()
    assert len(said) == 1 and f"for pid {os.getpid()} on {socket.gethostname()} (the live run, " in said[0], said
    assert str(gone.pid) not in said[0]
    assert wait.note.startswith(f"{node_lock.WAITED} ") and f"for pid {os.getpid()} on " in wait.note


def test_the_console_says_the_wait_once_naming_the_pid_stderr_named(tmp_path: Path) -> None:
    """Issue 35: the lock-wait note was repeated under every group of rows. Two check instances, one run that
    waits for this test's hold: the table says it once, above its rows, with the pid of the stderr line."""
    lock = tmp_path / "lock"
    config = write_config(tmp_path, """
        version: 1
        checks:
          shm: {size: {min: 1 MiB}}
          shm_again: {check: shm, size: {min: 1 MiB}}
        """)
    holder = node_lock.NodeLock.open(node_lock.Settings(str(lock), 1.0))
    holder.acquire("the test's own hold")
    run = subprocess.Popen([sys.executable, "-m", "preflight", "run", "-c", str(config)],
                           env=environment(lock), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    before = []
    try:
        while (line := run.stderr.readline()) and "waiting up to" not in line:
            before.append(line)
    finally:
        holder.close()
    out, err = run.communicate(timeout=120)
    waiting = line
    assert run.returncode == 0, "".join(before) + waiting + err
    assert f"for pid {os.getpid()} on " in waiting
    notes = [line for line in out.splitlines() if node_lock.WAITED in line]
    assert len(notes) == 1 and f"for pid {os.getpid()} on " in notes[0], out
    assert out.splitlines().index(notes[0]) < min(n for n, line in enumerate(out.splitlines()) if line.startswith("shm"))
