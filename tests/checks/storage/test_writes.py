"""Checkpoint writes include their fsync and leave nothing behind."""

from __future__ import annotations

import os

from preflight.checks.storage import writes


def test_write_once_writes_then_removes_the_file(tmp_path):
    name = str(tmp_path / "w.dat")
    rate = writes.write_once(name, 3 << 20, os.urandom(1 << 20))
    assert rate > 0
    assert not os.path.exists(name)


def test_an_fsync_run_takes_at_least_eight_real_fsyncs_and_removes_its_file(tmp_path):
    name = str(tmp_path / "f.dat")
    run = writes.fsync_run(name, 0.0)
    assert run.ops == len(run.latencies) == len(run.completions) == 8
    assert run.nbytes == 8 * 4096 and all(0 < x < 5 for x in run.latencies)
    assert all(run.started < done <= run.started + run.elapsed_s for done in run.completions)
    assert not os.path.exists(name)
