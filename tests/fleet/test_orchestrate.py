"""End-to-end fleet runs under torchrun (gloo on CPU): merged report, lost ranks, stragglers.

Each test starts real torchrun launchers; several "nodes" on this one machine are separate
launchers joined by torchrun's static rendezvous (``--nnodes 3 --node-rank N``), exactly
as on a real cluster. Sizes and durations are small: the CI machine has two shared cores.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import junitparser
import pytest

from tests.report_helpers import read_junit

ROOT = Path(__file__).resolve().parents[2]  # the checkout: its preflight, not an installed one
FLEET_YAML = """\
version: 1
defaults: {{timeout: 60s, duration: 1s}}
fleet: {{timeout: {timeout}}}
checks:
  storage:
    path: {data}
    data_size: 16 MiB
    seq_read: {{min: 1 MB/s}}
  collective:
    min_size: 64 KiB
    max_size: 512 KiB
    allreduce_busbw: {{min: 0.001 GB/s}}
    allgather_busbw: {{min: 0.001 GB/s}}
    straggler: {{max: 5}}
"""


# The fleet timeout of the runs that test failing fast. Every wait, joining included, gets a third
# of it (fleet/distributed.py): 5 s for four ranks importing torch beside three other test
# processes on two cores to reach the join together (8 s left 2.7 s, and a rank gave up once).
FAIL_FAST_S = 15
# Runs that must not fail wait longer than the runs that test failing fast: three
# launchers starting torch on two shared cores can be seconds apart.
PATIENT = ["--set", "fleet.timeout=30s"]


@pytest.fixture
def fleet_config(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.bin").write_bytes(os.urandom(16 << 20))
    config = tmp_path / "fleet.yaml"
    config.write_text(FLEET_YAML.format(timeout=f"{FAIL_FAST_S}s", data=data))
    return config


def torchrun(*launcher: str, args: list[str], log: Path) -> subprocess.Popen:
    """One torchrun launcher running ``preflight run`` from this checkout; output to ``log``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "preflight", "run", *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def node(rank: int, port: int) -> list[str]:
    """torchrun's arguments for node ``rank`` of a three-node fleet, one rank per node, joined at ``port``."""
    return ["--nnodes", "3", "--node-rank", str(rank), "--nproc-per-node", "1", "--rdzv-backend", "static",
            "--master-addr", "127.0.0.1", "--master-port", str(port)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait(process: subprocess.Popen, timeout: float = 150) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise


def rank_pid(launcher: subprocess.Popen, rank: int) -> int:
    """The pid of the worker with RANK=``rank`` among the launcher's children."""
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    for pid in children:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no rank {rank} among {children}")


def wait_for(log: Path, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {log}:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def test_four_ranks_write_one_merged_junit_and_json(fleet_config: Path, tmp_path: Path) -> None:
    junit, report, page = tmp_path / "fleet.xml", tmp_path / "fleet.json", tmp_path / "fleet.html"
    log = tmp_path / "torchrun.log"
    launcher = torchrun("--standalone", "--nproc-per-node", "4",
                        args=["-c", str(fleet_config), "--junit-xml", str(junit), "--json", str(report),
                              "--html", str(page), *PATIENT], log=log)
    assert wait(launcher) == 0, log.read_text()[-3000:]
    assert f"preflight: PASSED on 1 node ({socket.gethostname()})" in log.read_text()  # the fleet's verdict line

    suites = list(read_junit(junit))  # validated against junit-10.xsd first
    assert len(suites) == 1  # four ranks on one host: one node, one <testsuite>
    properties = {p.name: p.value for p in suites[0].properties()}
    assert properties["node_rank"] == "0" and properties["ranks"] == "0,1,2,3"
    assert properties["world_size"] == "4" and properties["hostname"] == socket.gethostname()
    names = [case.name for case in suites[0]]
    assert names.count("seq_read[node0]") == 1  # node-local: measured once per node, not once per rank
    assert {f"straggler[node0/rank{r}]" for r in range(4)} <= set(names)
    document = json.loads(report.read_text())
    assert document["kind"] == "fleet" and document["world_size"] == 4 and document["exit_code"] == 0
    results = {r["id"]: r for r in document["hosts"][0]["results"]}
    busbw = results["collective.allreduce_busbw"]
    assert busbw["unit"] == "GB/s" and busbw["value"] > 0.001 and busbw["verdict"] == "pass"
    assert "over 4 ranks" in busbw["method"] and len(busbw["samples"]) == 3
    assert results["collective.allgather_busbw"]["value"] > 0.001
    ratios = [results[f"collective.straggler[rank{r}]"]["value"] for r in range(4)]
    assert sorted(ratios)[1] <= 1.0 <= sorted(ratios)[2]  # over the median: the middle two bracket 1
    assert document["failed"] == [] and document["counts"]["pass"] >= 3  # the fleet's verdict at the top level
    html = page.read_text()  # rank 0 wrote the fleet's page: one node's row in the grid, one row per metric
    assert '<h1 id="verdict">preflight PASSED</h1>' in html and "1 node, 4 ranks" in html
    assert html.count('<tr data-node="node0">') == 1
    assert 'data-id="collective.allreduce_busbw"' in html and 'data-id="collective.straggler[rank3]"' in html


def test_a_rank_killed_mid_collective_is_named_by_every_survivor(fleet_config: Path, tmp_path: Path) -> None:
    port, logs = free_port(), [tmp_path / f"node{n}.log" for n in range(3)]
    junit = tmp_path / "fleet.xml"
    slow = ["--only", "collective", "--set", "collective.duration=30s", "--set", "collective.iterations=100000"]
    launchers = [torchrun(*node(n, port), args=["-c", str(fleet_config), "--junit-xml", str(junit), *slow],
                          log=logs[n]) for n in range(3)]
    wait_for(logs[2], "running collective")
    time.sleep(1)
    os.kill(rank_pid(launchers[2], 2), signal.SIGKILL)
    killed = time.monotonic()
    codes = [wait(launcher) for launcher in launchers]
    took = time.monotonic() - killed

    assert all(code != 0 for code in codes)
    assert took < FAIL_FAST_S + 20  # named within fleet.timeout, plus the launchers exiting on a busy machine
    # (torch's own default would wait 10 minutes)
    for survivor in (0, 1):
        assert f"preflight: error: rank {survivor}: rank 2 (" in logs[survivor].read_text()
    case = next(iter(next(iter(junitparser.JUnitXml.fromfile(str(junit))))))
    assert "rank 2 (" in case.result[0].message and "did not reach the end of `collective`" in case.result[0].message


def test_a_node_with_a_throttled_reader_is_flagged_as_the_straggler_and_each_node_is_named(
        fleet_config: Path, tmp_path: Path) -> None:
    port, logs = free_port(), [tmp_path / f"node{n}.log" for n in range(3)]
    junit, report = tmp_path / "fleet.xml", tmp_path / "fleet.json"
    # Node 1 reads with 4 KiB O_DIRECT requests instead of 1 MiB: same device, a throttled reader.
    throttle = {1: ["--set", "storage.block_size=4KiB"]}
    launchers = [torchrun(*node(n, port), args=["-c", str(fleet_config), "--junit-xml", str(junit), "--json",
                                                str(report), *PATIENT, "--only", "storage", *throttle.get(n, [])],
                          log=logs[n])
                 for n in range(3)]
    codes = [wait(launcher) for launcher in launchers]

    assert codes == [1, 1, 1], [log.read_text()[-2000:] for log in logs]  # the gate fails on every rank
    hosts = json.loads(report.read_text())["hosts"]
    assert [h["facts"]["node_rank"] for h in hosts] == ["0", "1", "2"], logs[0].read_text()[-3000:]
    flags = {h["facts"]["node_rank"]: next(r for r in h["results"] if r["id"] == "storage.seq_read.vs_fleet_median")
             for h in hosts}
    assert flags["1"]["verdict"] == "fail" and flags["1"]["value"] < 0.5
    assert "straggler" in flags["1"]["message"]
    assert flags["0"]["verdict"] == flags["2"]["verdict"] == "pass"
    absolute = next(r for r in hosts[1]["results"] if r["id"] == "storage.seq_read")
    assert absolute["verdict"] == "pass"  # it meets the 1 MB/s minimum: only the fleet comparison flags it

    # Only performance is compared with the fleet's median: facts (read_only, the nofile limit, ...) are not.
    performance = {"seq_read", "rand_read", "rand_read_p50", "rand_read_p99", "small_files", "small_files_bandwidth",
                   "seq_write", "fsync_p99"}
    for host in hosts:
        metrics = {r["metric"] for r in host["results"]}
        assert {"read_only", "unreadable_files", "skipped_files", "free_space", "open_files_limit"} <= metrics
        compared = {m.removesuffix(".vs_fleet_median") for m in metrics if m.endswith(".vs_fleet_median")}
        assert "seq_read" in compared and compared <= performance, compared

    suites = list(read_junit(junit))  # valid, and every (classname, name) unique across the nodes' suites
    assert len(suites) == 3
    for number, suite in enumerate(suites):
        names = {case.name for case in suite}
        assert {f"seq_read[node{number}]", f"seq_read.vs_fleet_median[node{number}]"} <= names, names
        assert all(name.endswith(f"[node{number}]") for name in names), names


def test_a_rank_that_never_joins_is_named_within_the_timeout(fleet_config: Path, tmp_path: Path) -> None:
    port, logs = free_port(), [tmp_path / f"node{n}.log" for n in range(3)]
    # Node 2's config is broken: its rank exits 2 before joining, as a node with a bad mount or env would.
    broken = {2: ["--set", "storage.data_size=lots"]}
    launchers = [torchrun(*node(n, port), args=["-c", str(fleet_config), "--only", "collective",
                                                *broken.get(n, [])], log=logs[n]) for n in range(3)]
    started = time.monotonic()
    codes = [wait(launcher) for launcher in launchers]

    assert all(code != 0 for code in codes)
    assert "storage.data_size" in logs[2].read_text()
    assert time.monotonic() - started < FAIL_FAST_S + 40  # the join timeout, plus three launchers starting torch
    for survivor in (0, 1):
        assert f"rank {survivor}: rank(s) 2 did not join the process group of 3 within fleet.timeout {FAIL_FAST_S}s" in logs[survivor].read_text()


def test_a_hung_rank_is_named_by_every_survivor_within_the_timeout(fleet_config: Path, tmp_path: Path) -> None:
    log, junit = tmp_path / "torchrun.log", tmp_path / "fleet.xml"
    slow = ["--only", "collective", "--set", "collective.duration=30s", "--set", "collective.iterations=100000"]
    launcher = torchrun("--standalone", "--nproc-per-node", "4",
                        args=["-c", str(fleet_config), "--junit-xml", str(junit), *slow], log=log)
    wait_for(log, "[rank 2, node 0] running collective")
    time.sleep(1)
    hung = rank_pid(launcher, 2)
    os.kill(hung, signal.SIGSTOP)  # alive to the launcher, silent to its peers: a frozen node
    stopped = time.monotonic()
    try:
        for survivor in (0, 1, 3):
            wait_for(log, f"preflight: error: rank {survivor}: rank 2 (", timeout=FAIL_FAST_S + 12)
        took = time.monotonic() - stopped
    finally:
        os.kill(hung, signal.SIGKILL)
    assert wait(launcher) != 0
    assert took < FAIL_FAST_S + 12  # the fleet timeout, and a survivor's turn at a busy CPU to say so
    case = next(iter(next(iter(junitparser.JUnitXml.fromfile(str(junit))))))
    assert "rank 2 (" in case.result[0].message
