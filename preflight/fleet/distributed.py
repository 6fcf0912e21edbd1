"""Joining the job's own process group under ``torchrun``, with timeouts that name missing ranks.

Nothing but torch.distributed: ``torchrun`` (or a PyTorchJob running it) starts the ranks
and sets their environment; ``init_process_group`` joins them; a separate gloo *control*
group carries barriers and result gathers. Barriers are ``monitored_barrier(
wait_all_ranks=True)``, which names ranks that hang but not ranks that crashed, so after a
failed barrier rank 0 also pings the others (gloo point-to-point on a third group) and sends
every survivor the list: every live rank fails with the same one-line error naming the
missing ranks. The control groups are separate because gloo closes every connection of a
group after a timeout in it, and a lost rank must not take the barrier that names it down
with it. Every wait gets a third of ``fleet.timeout``, so a stuck collective, the barrier
after it and rank 0's ping together stay within it.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from typing import Any, Mapping, MutableMapping, NamedTuple

from preflight.errors import UsageError

_MISSING_IN_BARRIER = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")
_MISSING_AT_JOIN = re.compile(r"keys: \[?([^\]]*)")


class Launch(NamedTuple):
    """Where this process sits in the fleet, as torchrun's environment says."""

    rank: int  # RANK: 0 .. world_size-1
    world_size: int  # WORLD_SIZE
    local_rank: int  # LOCAL_RANK: 0 .. local_world_size-1 on this node
    local_world_size: int  # LOCAL_WORLD_SIZE
    node_rank: int  # GROUP_RANK: this node's index among the nodes


class FleetError(Exception):
    """The fleet cannot go on: a rank never joined, died or hung. The message names the ranks."""


def launched_by_torchrun(environ: Mapping[str, str]) -> bool:
    """True inside a torchrun (torch.distributed.elastic) worker: it sets TORCHELASTIC_RUN_ID."""
    return "TORCHELASTIC_RUN_ID" in environ and "RANK" in environ


def launch_from(environ: Mapping[str, str]) -> Launch:
    """Read torchrun's variables (torch.distributed.run docs, "Environment Variables").

    Raises:
        UsageError: a variable is missing or not a number; the message says how to launch.
    """
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    missing = [name for name in names if name not in environ]
    if missing:
        raise UsageError(f"--distributed: {', '.join(missing)} not set: launch under torchrun, e.g. "
                         f"`torchrun --nproc-per-node 8 -m preflight run --distributed`")
    try:
        values = [int(environ[name]) for name in names[:5]]
    except ValueError:
        raise UsageError("--distributed: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK must be "
                         "whole numbers: launch under torchrun instead of setting them by hand") from None
    launch = Launch(*values)
    if not 0 <= launch.rank < launch.world_size or not 0 <= launch.local_rank < launch.local_world_size:
        raise UsageError(f"--distributed: RANK={launch.rank} of WORLD_SIZE={launch.world_size} (LOCAL_RANK="
                         f"{launch.local_rank} of {launch.local_world_size}) is inconsistent: launch under torchrun")
    return launch


class Fleet:
    """This rank's membership of the process group; every method must be called by every rank."""

    def __init__(self, launch: Launch, timeout_s: float, backend: str = "auto") -> None:
        self.launch = launch
        self.total_s = timeout_s
        # Each wait gets a third: a collective stuck on a lost rank times out, then the barrier
        # that names it does (or rank 0's ping, two thirds), all within the fleet timeout.
        self.timeout = datetime.timedelta(seconds=timeout_s / 3)
        self.backend = backend
        self.where = {launch.rank: f"rank {launch.rank}"}  # rank -> "rank 2 (node-b, node 1)"
        self.control: Any = None
        self.notice: Any = None
        self.launcher_error_handling: str | None = None  # TORCH_NCCL_ASYNC_ERROR_HANDLING as the launcher set it

    def join(self) -> None:
        """Join the process group (init method env://), then learn where every rank runs.

        Raises:
            FleetError: not every rank joined within the timeout (the missing ranks named).
        """
        import torch
        import torch.distributed as dist

        backend = self.backend
        if backend == "auto":
            usable = torch.cuda.is_available() and torch.cuda.device_count() >= self.launch.local_world_size
            backend = "nccl" if usable else "gloo"
        if backend == "nccl":  # GPU-only path: each rank drives its own GPU
            torch.cuda.set_device(self.launch.local_rank)
        self.launcher_error_handling = nccl_error_handling(os.environ)
        try:
            dist.init_process_group(backend, timeout=self.timeout)
            self.control = dist.new_group(backend="gloo", timeout=self.timeout)
            self.notice = dist.new_group(backend="gloo", timeout=self.timeout)
        except Exception as error:  # noqa: BLE001  torch raises DistStoreError/RuntimeError/ValueError here
            missing = _ranks_in_keys(str(error))
            who = f"rank(s) {_list(missing)}" if missing else "some ranks"
            raise FleetError(f"rank {self.launch.rank}: {who} did not join the process group of "
                             f"{self.launch.world_size} within fleet.timeout {self.total_s:g}s ({_first_line(error)}): check "
                             f"that every node started and can reach MASTER_ADDR, or raise fleet.timeout") from None
        self.barrier("joining")
        here = (self.launch.rank, socket.gethostname(), self.launch.node_rank)
        everyone: list[Any] = [None] * self.launch.world_size
        dist.all_gather_object(everyone, here, group=self.control)
        self.where = {rank: f"rank {rank} ({host}, node {node})" for rank, host, node in everyone}

    def barrier(self, what: str, timeout_s: float | None = None) -> None:
        """Wait for every rank, at most ``timeout_s`` (default: a third of the fleet timeout).

        Raises:
            FleetError: ranks did not arrive in time; on every live rank, naming them.
        """
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s) if timeout_s else self.timeout
        try:
            dist.monitored_barrier(group=self.control, timeout=timeout, wait_all_ranks=True)
        except Exception as error:  # noqa: BLE001  gloo raises RuntimeError with the ranks in the text
            missing = self._agree_on_missing(error)
            names = ", ".join(self.where.get(rank, f"rank {rank}") for rank in missing)
            names = names or f"a rank ({_first_line(error)})"
            limit = f"{timeout_s:g}s" if timeout_s else f"fleet.timeout {self.total_s:g}s"
            raise FleetError(f"rank {self.launch.rank}: {names} did not reach {what} within {limit} (died or "
                             f"hung): check that node's logs (dmesg, kubectl describe pod), or raise fleet.timeout") from None

    def gather(self, payload: Any) -> list[Any] | None:
        """Every rank's ``payload`` (picklable) on rank 0, in rank order; None elsewhere."""
        import torch.distributed as dist

        received: list[Any] | None = [None] * self.launch.world_size if self.launch.rank == 0 else None
        dist.gather_object(payload, received, dst=0, group=self.control)
        return received

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def _agree_on_missing(self, error: Exception) -> list[int]:
        """Every live rank's list of the ranks that are gone, decided by rank 0.

        monitored_barrier names ranks that hang, but not ranks whose connection closed (a
        crash): it raises "Connection closed by peer" instead. So rank 0 pings every rank it
        has not already named over the ``notice`` group, waiting two thirds of the fleet timeout;
        who does not answer is missing too. Then it sends the verdict to those who answered.
        """
        import torch
        import torch.distributed as dist

        size = self.launch.world_size
        if self.launch.rank != 0:
            token = torch.zeros(size, dtype=torch.uint8)
            patience = datetime.timedelta(seconds=self.total_s)
            try:
                dist.irecv(token, src=0, group=self.notice).wait(patience)  # the ping
                dist.send(token, dst=0, group=self.notice)  # the answer
                dist.irecv(token, src=0, group=self.notice).wait(patience)  # the verdict
            except Exception:  # noqa: BLE001  rank 0 itself is gone
                return [0]
            return [rank for rank in range(size) if token[rank]]
        # Closing the control group releases the ranks still waiting in the barrier at once.
        dist.destroy_process_group(self.control)
        match = _MISSING_IN_BARRIER.search(str(error))
        missing = {int(r) for r in match.group(1).replace(" ", "").split(",") if r} if match else set()
        answered = self._ping([rank for rank in range(1, size) if rank not in missing])
        missing |= set(range(1, size)) - set(answered)
        verdict = torch.tensor([rank in missing for rank in range(size)], dtype=torch.uint8)
        for rank in answered:
            try:
                dist.send(verdict, dst=rank, group=self.notice)
            except Exception:  # noqa: BLE001  it died since answering; the others still get the verdict
                pass
        return sorted(missing)

    def _ping(self, ranks: list[int]) -> list[int]:
        """The ranks among ``ranks`` that answer a ping within two thirds of the fleet timeout."""
        import time

        import torch
        import torch.distributed as dist

        # A live rank may still be inside a collective that waits on the lost one (up to a
        # third of the fleet timeout) before it reaches its barrier and answers: wait for it.
        deadline = time.monotonic() + 2 * self.timeout.total_seconds()
        token = torch.zeros(self.launch.world_size, dtype=torch.uint8)
        pending, sends = {}, []  # a send's Work must outlive its transfer
        for rank in ranks:
            try:
                sends.append(dist.isend(token, dst=rank, group=self.notice))
                pending[rank] = dist.irecv(torch.zeros_like(token), src=rank, group=self.notice)
            except Exception:  # noqa: BLE001  its connection is closed: it crashed
                continue
        answered = []
        for rank, work in pending.items():
            remaining = max(0.001, deadline - time.monotonic())
            try:
                work.wait(datetime.timedelta(seconds=remaining))
                answered.append(rank)
            except Exception:  # noqa: BLE001  closed (crashed) or silent until the deadline (hung)
                continue
        return answered


NCCL_ERROR_HANDLING = "2"  # CleanUpOnly: abort the communicators, raise in the waiting rank, keep the process


def nccl_error_handling(environ: MutableMapping[str, str]) -> str | None:
    """Set ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` to the mode the fleet needs; return what was there before.

    On a stuck or failed collective, mode 2 (CleanUpOnly) aborts the NCCL communicators and raises
    in the rank that waits, so that rank lives to reach the barrier that names the lost rank, and
    rank 0 writes the fleet's report. torchrun's elastic agent sets the variable in every worker
    (``local_elastic_agent.py``: the launcher's value, else "1", TearDown, which kills the process
    from the watchdog), so a default that defers to an existing value never applies there: it is
    set outright. ProcessGroupNCCL reads it when it is constructed (c10d ``getCvarInt``, the TORCH_
    name winning over the old NCCL_ one), so setting ``os.environ`` (putenv) before
    ``init_process_group`` covers every NCCL group this process makes; gloo ignores it. PyTorch
    docs, "PYTORCH ProcessGroupNCCL Environment Variables".
    """
    before = environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = NCCL_ERROR_HANDLING
    return before


def _ranks_in_keys(text: str) -> list[int]:
    """The ranks whose keys a store wait timed out on: gloo's ``keys: /default_pg/0//cpu//0/2``."""
    match = _MISSING_AT_JOIN.search(text)
    if not match:
        return []
    return sorted({int(key) for key in re.findall(r"/(\d+)(?=[,\s\]]|$)", match.group(1))})


def _list(ranks: list[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__
