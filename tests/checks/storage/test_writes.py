"""Checkpoint writes include their fsync and leave nothing behind."""

from __future__ import annotations

import os

from preflight.checks.storage import writes


def test_write_once_writes_then_removes_the_file(tmp_path):
    name = str(tmp_path / "w.dat")
    rate = writes.write_once(name, 3 << 20, os.urandom(1 << 20))
    assert rate > 0
    assert not os.path.exists(name)


def test_fsync_latencies_take_at_least_eight_real_fsyncs(tmp_path):
    name = str(tmp_path / "f.dat")
    latencies = writes.fsync_latencies(name, 0.0)
    assert len(latencies) == 8 and all(0 < x < 5 for x in latencies)
    assert not os.path.exists(name)
