"""The launcher side: ``preflight fleet`` starts torchrun on this node and bounds its rendezvous by ``fleet.timeout``.

torchrun's static rendezvous waits for every node's agent (600 s unless ``--rdzv-conf timeout=``) before any
preflight process starts, so a node that never starts left the others silent for ten minutes, and a
MASTER_PORT held by another job made node 0's torchrun exit 1 within a second (pytorch/pytorch#52848,
#126510), with no report either way. torchrun still does the work here; around it, on every node:

    node 0: the port free? else name its holder, write the report, exit 2 (nothing measured; no node at fault)
    start torchrun (static rendezvous, its own timeout fleet.timeout + SLACK_S: the launcher decides first)
    join: put this node's hostname in torchrun's own store (a TCPStore client that the store does not count);
        node 0's own torchrun must open it within fleet.timeout, another node must reach it within fleet.timeout
    node 0: from the store's opening, wait fleet.timeout for every node's key; publish the verdict (all, or the
        missing ranks)
    others: wait for node 0's verdict (node 0 unreachable within fleet.timeout: it is the missing one)
    a node missing: stop torchrun, write the report naming it (node 0; another node only when node 0 is the
        missing one), exit 1
    all joined (one node: nothing to join): wait for torchrun; exit with the fleet's code, which local rank 0
        leaves in FLEET_STATUS_FILE

After the join the fleet's own waits (``orchestrate``) bound every later step by ``fleet.timeout``.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, NamedTuple, Sequence

from preflight.errors import FLEET_STATUS_FILE
from preflight.host import ports

SLACK_S = 15  # torchrun's own rendezvous timeout runs this far past fleet.timeout, so the launcher decides first
NOTICE_S = 3  # node 0 keeps the store up this long after its verdict, for the other launchers to read it
STOP_S = 5  # torchrun's grace to stop its workers after SIGTERM, before SIGKILL
_POLL_S = 0.25
_JOINED = "preflight/fleet/joined/"  # + node rank: that node's launcher reached the store (value: its hostname)
_VERDICT = "preflight/fleet/verdict"  # node 0's: "all", or the missing node ranks ("1,3")


class Plan(NamedTuple):
    """Where this node sits in the fleet, as torchrun's own flags say, and how long the join may take."""

    nnodes: int
    node_rank: int
    nproc_per_node: str  # a count, or torchrun's auto/gpu/cpu
    master_addr: str
    master_port: int
    timeout_s: float  # fleet.timeout


class Ending(NamedTuple):
    """How the launch ended: the exit code, and the fleet's error where the launcher must report it ("" if not)."""

    code: int
    error: str = ""
    config_error: bool = False  # the launch's mistake (the port), no node's fault: exit 2
    report: bool = False  # this node writes the report: no preflight rank of the fleet will


def torchrun_command(plan: Plan, run_args: Sequence[str]) -> list[str]:
    """``python -m torch.distributed.run ... -m preflight run --distributed RUN_ARGS`` for ``plan``."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(plan.nnodes), "--node-rank",
            str(plan.node_rank), "--nproc-per-node", plan.nproc_per_node, "--rdzv-backend", "static",
            "--master-addr", plan.master_addr, "--master-port", str(plan.master_port),
            "--rdzv-conf", f"timeout={int(plan.timeout_s + SLACK_S)}",
            "-m", "preflight", "run", "--distributed", *run_args]


def launch(plan: Plan, run_args: Sequence[str], environ: Mapping[str, str]) -> Ending:
    """Run this node's part of the fleet under torchrun, its join bounded by ``plan.timeout_s``."""
    started = time.monotonic()
    if plan.node_rank == 0 and ports.in_use(plan.master_port):
        return _port_held(plan)
    status = tempfile.NamedTemporaryFile(prefix="preflight-fleet-status-", delete=False)
    status.close()
    os.unlink(status.name)  # written by local rank 0 when preflight ends: its absence says it never did
    previous = signal.signal(signal.SIGTERM, _terminated)
    child = subprocess.Popen(torchrun_command(plan, run_args), env={**environ, FLEET_STATUS_FILE: status.name},
                             start_new_session=True)  # its own process group: stopped whole, spared our terminal's ^C
    try:
        ending = _join(plan, child, started + plan.timeout_s) if plan.nnodes > 1 else None
        if child.poll() is not None and os.path.exists(status.name):  # the run ended before this launcher saw it
            return _finished(plan, child.returncode, status.name)     # join (a slow import here, a quick run there)
        if ending is not None:
            _stop(child, grace_s=0)  # torchrun starts its workers only once every node joined: none to wind down
            return ending
        returned = child.wait()
        return _finished(plan, returned, status.name)
    except BaseException:
        _stop(child)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        if os.path.exists(status.name):
            os.unlink(status.name)


def _join(plan: Plan, child: subprocess.Popen, deadline: float) -> Ending | None:
    """Wait for every node to reach the rendezvous; None when all did, else how the launch ends."""
    store = _connect(plan, child, deadline)
    if store is None and child.poll() is not None:
        return _early_exit(plan, child.returncode)
    if store is None and plan.node_rank == 0:
        return Ending(1, f"torchrun on node 0 ({socket.gethostname()}) did not open the fleet's rendezvous at "
                         f"{plan.master_addr}:{plan.master_port} within fleet.timeout {plan.timeout_s:g}s of starting: "
                         f"see its output above (a slow start: raise fleet.timeout)", report=True)
    if store is None:
        return Ending(1, f"node 0 did not open the fleet's rendezvous at {plan.master_addr}:{plan.master_port} "
                         f"within fleet.timeout {plan.timeout_s:g}s, so no node of the fleet of {plan.nnodes} could "
                         f"join (this is node {plan.node_rank} on {socket.gethostname()}): check that node 0 started "
                         f"and that {plan.master_addr} is its address", report=True)
    store.set(f"{_JOINED}{plan.node_rank}", socket.gethostname())
    if plan.node_rank == 0:
        return _decide(plan, store, child, time.monotonic() + plan.timeout_s)
    # node 0's window opens when its own launcher reaches the store, which may be after this one did
    return _await_verdict(plan, store, child, time.monotonic() + 2 * plan.timeout_s + NOTICE_S)


def _connect(plan: Plan, child: subprocess.Popen, deadline: float) -> Any:
    """A client of torchrun's store at the master's address, or None when none answered before ``deadline``.

    ``wait_for_workers=False``: the store counts the agents it waits for by their own connections, not this one.
    """
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d's warnings of each refused attempt
    from torch.distributed import TCPStore

    while time.monotonic() < deadline and child.poll() is None:
        attempt = max(1.0, min(5.0, deadline - time.monotonic()))
        try:
            return TCPStore(plan.master_addr, plan.master_port, is_master=False, wait_for_workers=False,
                            timeout=datetime.timedelta(seconds=attempt))
        except Exception:  # noqa: BLE001  refused or timed out (DistNetworkError, DistStoreError): not yet up
            time.sleep(_POLL_S)
    return None


def _decide(plan: Plan, store: Any, child: subprocess.Popen, deadline: float) -> Ending | None:
    """Node 0: wait for every node's key until ``deadline``, then publish and return the verdict."""
    missing = list(range(1, plan.nnodes))
    while missing and time.monotonic() < deadline and child.poll() is None:
        missing = [rank for rank in missing if not store.check([f"{_JOINED}{rank}"])]
        if missing:
            time.sleep(_POLL_S)
    if child.poll() is not None:
        return _early_exit(plan, child.returncode)
    if not missing:
        store.set(_VERDICT, "all")
        return None
    store.set(_VERDICT, ",".join(map(str, missing)))
    joined = [f"node {rank} on {store.get(f'{_JOINED}{rank}').decode()}" for rank in range(plan.nnodes)
              if rank not in missing]
    time.sleep(NOTICE_S)  # the other launchers read the verdict before this store closes with torchrun
    return Ending(1, f"node(s) {', '.join(map(str, missing))} of {plan.nnodes} did not join the fleet within "
                     f"fleet.timeout {plan.timeout_s:g}s (joined: {', '.join(joined)}): start `preflight fleet` on "
                     f"every node with its --node-rank and --master-addr {plan.master_addr} --master-port "
                     f"{plan.master_port}, check that node's logs (kubectl describe pod, the Slurm task's output), "
                     f"or raise fleet.timeout", report=True)


def _await_verdict(plan: Plan, store: Any, child: subprocess.Popen, deadline: float) -> Ending | None:
    """Another node: node 0's verdict, read before ``deadline``."""
    while time.monotonic() < deadline and child.poll() is None:
        try:
            if store.check([_VERDICT]):
                verdict = store.get(_VERDICT).decode()
                if verdict == "all":
                    return None
                return Ending(1, f"node(s) {verdict} of {plan.nnodes} did not join the fleet within fleet.timeout "
                                 f"{plan.timeout_s:g}s: node 0's report names them")
        except Exception:  # noqa: BLE001  node 0's store closed: its torchrun ended
            break
        time.sleep(_POLL_S)
    if child.poll() is not None:
        return _early_exit(plan, child.returncode)
    return Ending(1, f"node 0 gave no verdict on the fleet's join within fleet.timeout {plan.timeout_s:g}s of this "
                     f"node reaching {plan.master_addr}:{plan.master_port}: node 0's output says why")


def _early_exit(plan: Plan, returned: int) -> Ending:
    """torchrun ended before the fleet joined: on node 0 a port taken since the check is named."""
    if plan.node_rank == 0 and ports.in_use(plan.master_port):
        return _port_held(plan)
    return Ending(1, f"torchrun exited {returned} on node {plan.node_rank} ({socket.gethostname()}) before the fleet "
                     f"joined: see its output above", report=plan.node_rank == 0)


def _port_held(plan: Plan) -> Ending:
    holder = ports.describe(ports.holders(plan.master_port))
    return Ending(2, f"MASTER_PORT {plan.master_port} on node 0 ({socket.gethostname()}) is held by {holder}, so "
                     f"torchrun cannot open the fleet's rendezvous there: give every node of the fleet the same free "
                     f"--master-port, or end that process (nothing was measured)", config_error=True, report=True)


def _finished(plan: Plan, returned: int, status: str) -> Ending:
    """torchrun ended after the join: the fleet's exit code as local rank 0 left it, else torchrun's own."""
    if returned == 0:
        return Ending(0)
    try:
        with open(status) as handle:
            return Ending(int(handle.read().strip()))
    except (OSError, ValueError):
        return Ending(1, f"torchrun exited {returned} on node {plan.node_rank} ({socket.gethostname()}) and preflight "
                         f"did not finish there: see torchrun's output above", report=plan.node_rank == 0)


def _stop(child: subprocess.Popen, grace_s: float = STOP_S) -> None:
    """End torchrun and its workers: SIGTERM to its process group (torchrun passes it on to its workers), then,
    after ``grace_s`` or once torchrun is gone, SIGKILL to whatever is left (torchrun blocked inside its store's
    wait runs no signal handler until that wait ends)."""
    if grace_s:
        _signal_group(child, signal.SIGTERM)
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(child, signal.SIGKILL)
    child.wait()


def _signal_group(child: subprocess.Popen, sent: signal.Signals) -> None:
    try:
        os.killpg(child.pid, sent)
    except ProcessLookupError:  # every process of the group has ended
        pass


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the launcher's own SIGTERM (a pod deleted, a job cancelled): torchrun is stopped
