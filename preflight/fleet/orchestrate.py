"""A fleet run: every torchrun rank joins, each node measures once, rank 0 writes one report.

Steps, each bounded by ``fleet.timeout`` so a lost rank fails the others instead of hanging:

    join the process group (distributed.Fleet)
    local rank 0 of each node: run the node-scope checks in worker processes (runner.run);
        the node's other ranks wait at a barrier sized by those checks' timeouts
    every rank: run each fleet-scope check (``collective``) together, in-process
    gather every rank's contribution on rank 0; rank 0 merges (report.merge), judges the
        fleet checks and the per-node comparisons, writes the reports
    broadcast rank 0's exit code; every rank exits with it, so the launcher fails as a whole

When the fleet breaks (a rank never joins, dies or hangs), every live rank prints one line
naming the missing ranks and exits 1; rank 0 still writes what it has: its own node's
results and an ``error`` result that names them.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
import sys
import time
from typing import Callable

from preflight import report, runner
from preflight.checks import CHECKS
from preflight.checks.base import scope
from preflight.config import Config, Instance
from preflight.fleet.distributed import Fleet, FleetError, Launch
from preflight.host import node_lock
from preflight.report import RunReport
from preflight.report.merge import Contribution, merge, partial
from preflight.errors import EXIT_USAGE, UsageError
from preflight.verdict import EXIT_GATE_FAILED, Outcome, Result, exit_code, judge

WriteReports = Callable[[list[RunReport]], None]


def run(config: Config, launch: Launch, write: WriteReports, temp_dir: str | None = None) -> int:
    """Run ``config`` as one rank of the fleet; ``write`` is called on rank 0 only. Returns the exit code.

    ``temp_dir`` is where the node's workers keep their logs (see ``runner.run``).
    """
    node_checks = tuple(i for i in config.instances if scope(CHECKS[i.check]) == "node")
    fleet_checks = tuple(i for i in config.instances if scope(CHECKS[i.check]) == "fleet")
    fleet = Fleet(launch, config.fleet.timeout_s, config.fleet.backend)
    started, clock = report.now(), time.monotonic()
    own: RunReport | None = None
    stopped = False
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        fleet.join()
        _say(launch, f"joined a fleet of {launch.world_size} ranks")
        if launch.local_rank == 0:
            results = runner.run(config._replace(instances=node_checks), progress=_progress(launch),
                                 temp_dir=temp_dir)
            own = report.build(config.path, config.digest, results, started, time.monotonic() - clock)
        node_budget = (sum(instance.timeout_s for instance in node_checks) + config.fleet.timeout_s
                       + node_lock.settings().wait_s)  # local rank 0 may wait for another run on its node
        fleet.barrier("the end of the node checks", node_budget)
        fleet_results = [result for instance in fleet_checks for result in _run_fleet_check(fleet, instance, launch)]
        fleet.barrier("the gather of results")
        contribution = Contribution(launch.rank, launch.node_rank, socket.gethostname(), own)
        gathered = fleet.gather(contribution)
        code = EXIT_GATE_FAILED
        if gathered is not None:
            reports = merge(gathered, fleet_results, config.fleet, launch.world_size)
            reports = [dataclasses.replace(r, duration_s=time.monotonic() - clock) for r in reports]
            try:
                write(reports)
            except UsageError as error:  # checked before measuring; a disk can still fill up meanwhile
                print(f"preflight: error: {error}", file=sys.stderr, flush=True)
                gathered = None
            code = EXIT_USAGE if gathered is None else exit_code([result for r in reports for result in r.results])
        code = fleet.broadcast(code)
    except FleetError as error:
        stopped = True
        # torchrun's SIGTERM follows a lost rank (the SIGKILL of a hung one, say) within moments: here it would cut
        # short the very report that names that rank. The launcher's SIGKILL after its grace period still ends us.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"preflight: error: {error}", file=sys.stderr, flush=True)
        if launch.rank == 0:
            own = own or report.build(config.path, config.digest, [], started, time.monotonic() - clock)
            lost = Result("fleet", "fleet", "", "error", str(error), hint="see the missing rank's node")
            write(partial(own, lost, launch.world_size, launch.node_rank))
        code = EXIT_GATE_FAILED
    finally:
        signal.signal(signal.SIGTERM, previous)
        fleet.leave()
    if launch.rank != 0 and not stopped:
        _say(launch, f"results sent to rank 0; the fleet's exit code is {code}")
    return code


def _stop_on_sigterm(signum: int, frame: object) -> None:
    # torchrun sends SIGTERM to a node's ranks when one of them died: say so, and let rank 0 write its report
    raise FleetError("stopped by SIGTERM: the launcher ended the fleet, usually because a rank died "
                     "(torchrun names it under 'Root Cause')")


def _run_fleet_check(fleet: Fleet, instance: Instance, launch: Launch) -> list[Result]:
    """Measure on every rank at once; a rank that was lost surfaces as FleetError at the barrier."""
    check = CHECKS[instance.check]
    _say(launch, f"running {instance.name} ...")
    start = time.monotonic()
    try:
        measured = check.measure(instance.options, instance.budget)
        outcome = Outcome(tuple(measured), duration_s=time.monotonic() - start)
    except Exception as error:  # noqa: BLE001  a check's failure is its result; a lost rank is named below
        outcome = Outcome(error=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
                          duration_s=time.monotonic() - start)
    fleet.barrier(f"the end of `{instance.name}`")
    return judge(instance, outcome)


def _progress(launch: Launch) -> runner.ProgressCallback:
    def progress(instance: Instance, results: object) -> None:
        if results is None:
            _say(launch, f"running {instance.name} ...")

    return progress


def _say(launch: Launch, text: str) -> None:
    print(f"  [rank {launch.rank}, node {launch.node_rank}] {text}", file=sys.stderr, flush=True)
