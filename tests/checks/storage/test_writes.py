"""Checkpoint writes include their fsync and leave nothing behind."""

from __future__ import annotations

import os
from array import array

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


class Ticks:
    """A ``time`` module whose ``perf_counter`` advances ``step`` seconds per call: 1, 2, 3 ... by default."""

    def __init__(self, step: float = 1.0) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def _removed(monkeypatch) -> dict[str, os.stat_result]:
    """The stat of each file the writes remove, taken just before its removal."""
    seen, real = {}, os.unlink

    def unlink(name):
        seen[os.path.basename(name)] = os.stat(name)
        real(name)

    monkeypatch.setattr(os, "unlink", unlink)
    return seen


def test_write_once_is_the_bytes_over_the_time_to_write_and_fsync_them_in_decimal_megabytes(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "time", Ticks(step=0.5))
    removed = _removed(monkeypatch)
    # 3 MiB in 0.5 s (the clock reads 0.5 before the open, 1.0 after the fsync): 3 x 1048576 / 0.5 / 10^6 MB/s
    assert writes.write_once(str(tmp_path / "w.dat"), 3 << 20, os.urandom(1 << 20)) == 6.291456
    assert removed["w.dat"].st_size == 3 << 20 and removed["w.dat"].st_mode & 0o777 == 0o600  # private scratch
    leftover = tmp_path / "old.dat"
    leftover.write_bytes(b"x" * (5 << 20))  # longer than the write: truncated, not overwritten in part
    writes.write_once(str(leftover), 3 << 20, os.urandom(1 << 20))
    assert removed["old.dat"].st_size == 3 << 20


def test_an_fsync_run_times_each_fsync_until_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "time", Ticks())
    run = writes.fsync_run(str(tmp_path / "f.dat"), 20.0)
    # clock: start 1, deadline 21; each fsync timed from 2 to 3, 4 to 5 ... 20 to 21: ten fsyncs
    assert run == writes.Tally(10, 10 * 4096, array("d", [1.0] * 10), 20.0, array("d", range(3, 22, 2)), 1.0)


def test_a_short_fsync_run_still_takes_eight(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "time", Ticks())
    run = writes.fsync_run(str(tmp_path / "f.dat"), 0.0)
    assert run == writes.Tally(8, 8 * 4096, array("d", [1.0] * 8), 16.0, array("d", range(3, 18, 2)), 1.0)


def test_the_fsync_run_appends_4k_blocks_then_wraps_to_the_file_start(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "FSYNC_FILE_BYTES", 3 * 4096)
    monkeypatch.setattr(writes, "time", Ticks())
    written, real = [], os.pwrite
    monkeypatch.setattr(os, "pwrite",
                        lambda fd, data, offset: written.append((len(data), offset)) or real(fd, data, offset))
    removed = _removed(monkeypatch)
    writes.fsync_run(str(tmp_path / "f.dat"), 0.0)
    assert written == [(4096, offset * 4096) for offset in (0, 1, 2, 0, 1, 2, 0, 1)]
    assert removed["f.dat"].st_size == 3 * 4096 and removed["f.dat"].st_mode & 0o777 == 0o600
