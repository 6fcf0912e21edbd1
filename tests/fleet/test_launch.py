"""``preflight fleet`` on loopback: real torchrun launchers, one per "node", as on a cluster (issue 45 case 3).

torchrun's static rendezvous alone waits 600 s for a node that never starts, before any preflight process runs,
and exits 1 within a second, with no report, when MASTER_PORT is held on node 0. The launcher bounds the first
by ``fleet.timeout`` and names the missing node in a report; it finds the second before starting torchrun and
names the port and its holder, exit 2 (the launch's mistake, not a node's fault).
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

import pytest

from preflight.host import ports

ROOT = Path(__file__).resolve().parents[2]  # the checkout: its preflight, not an installed one
TIMEOUT_S = 15  # fleet.timeout of these runs
# What the issue allows a fleet with a missing node: fleet.timeout, then 30 s to stop torchrun and write the report.
ENDS_WITHIN_S = TIMEOUT_S + 30
CONFIG = """\
version: 1
defaults: {{timeout: 60s, duration: 1s}}
fleet: {{timeout: {timeout}s}}
checks:
  shm:
    size: {{min: 1 MiB}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fleet(tmp_path: Path, node_rank: int, port: int, *extra: str, nnodes: int = 2,
          timeout: int = TIMEOUT_S) -> subprocess.Popen:
    """``preflight fleet`` as node ``node_rank`` of ``nnodes`` at ``port``, its reports in ``tmp_path/nodeN``."""
    config = tmp_path / "fleet.yaml"
    config.write_text(CONFIG.format(timeout=timeout))
    where = tmp_path / f"node{node_rank}"
    where.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", OMP_NUM_THREADS="1",
               PREFLIGHT_LOCK=str(tmp_path / "node.lock"))
    command = [sys.executable, "-m", "preflight", "fleet", "--nnodes", str(nnodes), "--node-rank", str(node_rank),
               "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port), "-c", str(config),
               "--json", str(where / "fleet.json"), "--junit-xml", str(where / "fleet.xml"), *extra]
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=(where / "out.txt").open("wb"),
                            stderr=(where / "err.txt").open("wb"), start_new_session=True)


def finish(process: subprocess.Popen, timeout: float = 150) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise


def results(report: Path) -> dict[str, dict]:
    document = json.loads(report.read_text())
    return {result["id"]: result for host in document["hosts"] for result in host["results"]}


@pytest.mark.parametrize("started, missing", [(0, 1), (1, 0)], ids=["node-1-never-starts", "node-0-never-starts"])
def test_a_node_that_never_starts_fails_the_fleet_within_its_timeout_with_a_report(tmp_path, started, missing):
    # Before: torchrun --rdzv-backend static waited 600 s in its rendezvous, no preflight process started, nothing
    # was written. Now node 0 names the node that never joined; where node 0 itself never started, the node that
    # did start names it (no one else can).
    port = free_port()
    clock = time.monotonic()
    launcher = fleet(tmp_path, started, port)
    code = finish(launcher)
    took = time.monotonic() - clock
    err = (tmp_path / f"node{started}" / "err.txt").read_text()
    assert code == 1, err[-3000:]
    assert took < ENDS_WITHIN_S, f"{took:.0f}s: {err[-3000:]}"
    document = json.loads((tmp_path / f"node{started}" / "fleet.json").read_text())
    assert (document["kind"], document["exit_code"]) == ("fleet", 1)
    failed = results(tmp_path / f"node{started}" / "fleet.json")["fleet"]
    assert failed["verdict"] == "error"
    if missing == 1:
        assert failed["message"].startswith(f"node(s) 1 of 2 did not join the fleet within fleet.timeout 15s "
                                            f"(joined: node 0 on {socket.gethostname()}): ")
    else:
        assert failed["message"].startswith(f"node 0 did not open the fleet's rendezvous at 127.0.0.1:{port} within "
                                            f"fleet.timeout 15s, so no node of the fleet of 2 could join (this is "
                                            f"node 1 on {socket.gethostname()})")
    assert failed["message"] in (tmp_path / f"node{started}" / "fleet.xml").read_text()
    assert f"preflight: error: {failed['message']}" in err
    # torchrun was stopped, store and all: nothing listens on the port (its closed connections may linger in
    # TIME_WAIT), and no worker of it ever started preflight
    assert ports.holders(port) == [] and ports.in_use(port) is None
    assert "joined a fleet" not in err


def test_a_master_port_held_by_another_process_fails_at_once_naming_it(tmp_path):
    # Before: torchrun exited 1 after a second with EADDRINUSE and no report, read as "the node failed". The port
    # is the launch's choice and the node is healthy: exit 2, nothing measured, the holder named.
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        clock = time.monotonic()
        code = finish(fleet(tmp_path, 0, port, timeout=120))
        took = time.monotonic() - clock
    err = (tmp_path / "node0" / "err.txt").read_text()
    assert code == 2, err[-3000:]
    assert took < 120, err  # it never waited for the rendezvous: torchrun was not started
    failed = results(tmp_path / "node0" / "fleet.json")["fleet"]
    assert json.loads((tmp_path / "node0" / "fleet.json").read_text())["exit_code"] == 2
    assert failed["message"].startswith(f"MASTER_PORT {port} on node 0 ({socket.gethostname()}) is held by pid "
                                        f"{os.getpid()} (user ")
    assert failed["message"].endswith("so torchrun cannot open the fleet's rendezvous there: give every node of the "
                                      "fleet the same free --master-port, or end that process (nothing was measured)")
    assert err.splitlines()[-1] == f"preflight: error: {failed['message']}"
    assert "torch.distributed" not in err and "joined a fleet" not in err


def test_two_nodes_that_both_start_run_as_one_fleet_and_exit_with_its_code(tmp_path):
    port = free_port()
    nodes = [fleet(tmp_path, rank, port, "--set", "fleet.timeout=60s") for rank in (1, 0)]
    codes = [finish(node) for node in nodes]
    err = (tmp_path / "node0" / "err.txt").read_text()
    assert codes == [0, 0], err[-3000:]
    document = json.loads((tmp_path / "node0" / "fleet.json").read_text())
    assert (document["world_size"], document["exit_code"], len(document["hosts"])) == (2, 0, 2)
    assert {r["id"]: r["verdict"] for h in document["hosts"] for r in h["results"] if r["metric"] == "size"} == {
        "shm.size": "pass"}
    assert not (tmp_path / "node1" / "fleet.json").exists()  # rank 0 writes the fleet's one report


def test_a_config_mistake_found_while_measuring_keeps_its_exit_code_2_through_torchrun(tmp_path):
    # torchrun exits 1 for any failing worker; local rank 0 leaves preflight's own code for the launcher.
    config = tmp_path / "missing.yaml"
    config.write_text(f"version: 1\nfleet: {{timeout: 30s}}\nchecks:\n  storage:\n    path: {tmp_path}/no-such-dir\n"
                      f"    seq_read: {{min: 1 MB/s}}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", OMP_NUM_THREADS="1",
               PREFLIGHT_LOCK=str(tmp_path / "node.lock"))
    done = subprocess.run([sys.executable, "-m", "preflight", "fleet", "--nnodes", "1", "--master-port",
                           str(free_port()), "-c", str(config), "--json", str(tmp_path / "r.json")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 2, done.stderr[-3000:]
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 2
    assert "exitcode  : 2" in done.stderr  # what torchrun itself said before exiting 1
