"""``preflight fleet``: run ``preflight run --distributed`` under torchrun on this node, its rendezvous bounded by
``fleet.timeout`` and its failures reported (``fleet.launch``).

The same command on every node; only ``--node-rank`` differs. torchrun's own flags, with torchrun's defaults and
the ``PET_*`` variables it reads (a Kubeflow PyTorchJob sets them), then any option of ``preflight run``, which
every rank is given. The config is loaded here first, so a mistake in it is one line and exit 2 on every node
before torchrun starts.
"""

from __future__ import annotations

import argparse
import os
import sys

from preflight.commands import run
from preflight.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping, Sequence, TextIO

# torchrun's flags this command takes, each with the variable torchrun reads for it (torch/distributed/run.py).
LAUNCHER = {
    "--nnodes": ("PET_NNODES", "N", "nodes in the fleet, one count (torchrun's static rendezvous); else $PET_NNODES"),
    "--node-rank": ("PET_NODE_RANK", "RANK", "this node's index, 0 to N-1, node 0 hosting the rendezvous; else "
                                             "$PET_NODE_RANK, else 0 with one node"),
    "--nproc-per-node": ("PET_NPROC_PER_NODE", "N", "ranks on this node: a count, or gpu, cpu, auto; else "
                                                    "$PET_NPROC_PER_NODE, else 1"),
    "--master-addr": ("PET_MASTER_ADDR", "ADDR", "node 0's address, the same on every node; else $PET_MASTER_ADDR, "
                                                 "else 127.0.0.1 with one node"),
    "--master-port": ("PET_MASTER_PORT", "PORT", "the rendezvous port on node 0, the same on every node; else "
                                                 "$PET_MASTER_PORT, else 29500"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, (_, metavar, help) in LAUNCHER.items():
        spellings = dict.fromkeys([flag, _underscored(flag)])  # torchrun takes --node_rank too
        parser.add_argument(*spellings, metavar=metavar, dest=flag[2:].replace("-", "_"), help=help)
    run.add_arguments(parser)


def main(args: argparse.Namespace, argv: Sequence[str], environ: Mapping[str, str] = os.environ,
         stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Launch this node's part of the fleet; returns the exit code (the fleet's, or the launch's own failure's).

    Raises:
        UsageError: a launcher flag or the config is wrong (reports of a bad config are written first).
    """
    import dataclasses
    import time

    from preflight import config, report
    from preflight.fleet import launch
    from preflight.report import deliver
    from preflight.report.merge import partial
    from preflight.verdict import Result

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    path = config.resolve_path(args.config)
    to = run.destinations(args)
    nnodes, node_rank, nproc, address, port = _launcher(args, environ)
    world_size = nnodes * int(nproc) if nproc.isdigit() else None
    try:
        for destination in to.files():
            deliver.check_writable(destination)
        loaded = config.load(path, args.overrides, environ, baseline=args.baseline)
    except UsageError as error:
        deliver.deliver_config_error(path, error, to, environ, stdout, stderr, world_size or nnodes)
        raise
    plan = launch.Plan(nnodes, node_rank, nproc, address, port, loaded.fleet.timeout_s)
    started, clock = report.now(), time.monotonic()
    ending = launch.launch(plan, run_arguments(argv), environ)
    if ending.error and not (ending.report and ending.config_error):  # else the report's last line says it
        print(f"preflight: error: {ending.error}", file=stderr, flush=True)
    if ending.report:
        own = report.build(path, loaded.digest, [], started, time.monotonic() - clock)
        if world_size:
            ranks = range(node_rank * int(nproc), (node_rank + 1) * int(nproc))
            own = dataclasses.replace(own, facts={**own.facts, "ranks": ",".join(map(str, ranks))})
        failed = Result("fleet", "fleet", "", "error", ending.error, config_error=ending.config_error,
                        hint=_HINT_PORT if ending.config_error else _HINT_JOIN)
        deliver.deliver(partial(own, failed, world_size or nnodes, node_rank), to, environ, stdout, stderr,
                        world_size=world_size or nnodes)
    return ending.code


_HINT_JOIN = "start every node of the fleet, or raise fleet.timeout; the node named has the fault"
_HINT_PORT = "choose another --master-port, the same on every node; no node is at fault"


def run_arguments(argv: Sequence[str]) -> list[str]:
    """``argv`` (``fleet`` and its arguments) less the subcommand and the launcher's flags: what every rank runs."""
    names = set(LAUNCHER) | {_underscored(flag) for flag in LAUNCHER}
    tokens = list(argv)[1:] if list(argv)[:1] == ["fleet"] else list(argv)
    kept, skip = [], False
    for token in tokens:
        if skip:
            skip = False
        elif token in names:
            skip = True
        elif token.split("=", 1)[0] not in names:
            kept.append(token)
    return kept


def _launcher(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[int, int, str, str, int]:
    """The launcher's flags, else torchrun's variables, else its defaults, checked.

    Raises:
        UsageError: one missing or malformed, named with its fix.
    """
    def given(dest: str) -> str | None:
        flag = f"--{dest.replace('_', '-')}"
        value = getattr(args, dest)
        return value if value is not None else environ.get(LAUNCHER[flag][0])

    nnodes = _count(given("nnodes"), "--nnodes", "give the fleet's node count, the same on every node, e.g. "
                                                 "`preflight fleet --nnodes 4 --node-rank $NODE_RANK ...`")
    single = nnodes == 1
    node_rank = _count(given("node_rank") or ("0" if single else None), "--node-rank",
                       f"give this node's index, 0 to {nnodes - 1} (Slurm: $SLURM_NODEID; an Indexed Job: "
                       f"$JOB_COMPLETION_INDEX)", minimum=0)
    if node_rank >= nnodes:
        raise UsageError(f"--node-rank {node_rank} is not a node of --nnodes {nnodes}: give 0 to {nnodes - 1}")
    nproc = given("nproc_per_node") or "1"
    if not (nproc.isdigit() and int(nproc) > 0) and nproc not in ("gpu", "cpu", "auto"):
        raise UsageError(f"--nproc-per-node {nproc}: give a count of ranks, or gpu, cpu or auto")
    address = given("master_addr") or ("127.0.0.1" if single else "")
    if not address:
        raise UsageError(f"--master-addr not given (nor $PET_MASTER_ADDR): give node 0's address, the same on "
                         f"every node of the {nnodes}")
    port = _count(given("master_port") or "29500", "--master-port", "give a TCP port, 1 to 65535", minimum=1)
    if port > 65535:
        raise UsageError(f"--master-port {port}: give a TCP port, 1 to 65535")
    return nnodes, node_rank, nproc, address, port


def _count(value: str | None, flag: str, fix: str, minimum: int = 1) -> int:
    variable = LAUNCHER[flag][0]
    if value is None:
        raise UsageError(f"{flag} not given (nor ${variable}): {fix}")
    if ":" in value and flag == "--nnodes":
        raise UsageError(f"--nnodes {value}: preflight fleet runs torchrun's static rendezvous, which needs one "
                         f"fixed count of nodes: give --nnodes N")
    if not value.strip().isdigit() or int(value) < minimum:
        raise UsageError(f"{flag} {value!r}: {fix}")
    return int(value)



def _underscored(flag: str) -> str:
    return "--" + flag[2:].replace("-", "_")
