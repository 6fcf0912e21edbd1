"""Rank 0 writes the fleet's report even when the launcher's SIGTERM arrives while it writes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from preflight import config
from preflight.fleet import orchestrate
from preflight.fleet.distributed import FleetError, Launch
from tests.helpers import write_config


class LostFleet:
    """A fleet whose peers are gone: joining it fails as a hung or killed rank makes it fail."""

    def __init__(self, *args: object) -> None:
        pass

    def join(self) -> None:
        raise FleetError("rank 2 (node 0) did not reach the join within 8s (died or hung)")

    def leave(self) -> None:
        pass


def test_a_sigterm_while_rank_0_writes_the_report_does_not_cut_it_short(tmp_path: Path, monkeypatch) -> None:
    # The hung-rank fleet test lost its JUnit file this way on a busy machine: the test SIGKILLs the hung rank once
    # the survivors named it, torchrun then SIGTERMs the survivors, and rank 0 was still writing.
    loaded = config.load(str(write_config(tmp_path, "version: 1\nchecks:\n  shm: {}\n")), environ={})
    monkeypatch.setattr(orchestrate, "Fleet", LostFleet)
    written = []

    def write(reports) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher's SIGTERM, delivered mid-write
        written.append(reports)

    code = orchestrate.run(loaded, Launch(0, 4, 0, 4, 0), write, temp_dir=str(tmp_path))
    assert code == orchestrate.EXIT_GATE_FAILED
    ((report,),) = written  # one write, of rank 0's node report with the fleet's error last
    assert "rank 2 (node 0) did not reach the join" in report.results[-1].message
    assert signal.getsignal(signal.SIGTERM) is not orchestrate._stop_on_sigterm  # restored after the run
