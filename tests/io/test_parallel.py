"""Loops in processes of threads start together, run to one deadline, and report their work; a
continuous run is cut into intervals after its ramp."""

from __future__ import annotations

import os
import time
from array import array

import pytest

from preflight.io.parallel import Tally, in_intervals, run_loops


def _counting_loop(index):
    pid = os.getpid()

    def loop(deadline):
        start = time.perf_counter()
        ops = 0
        while time.perf_counter() < deadline:
            time.sleep(0.01)
            ops += 1
        return Tally(ops, pid, array("d", [float(index)]), time.perf_counter() - start)

    return loop


def test_every_loop_runs_once_in_its_own_process():
    tally = run_loops(_counting_loop, processes=3, threads=2, seconds=0.3)
    assert sorted(tally.latencies) == [0, 1, 2, 3, 4, 5]
    assert 6 * 15 <= tally.ops <= 6 * 31  # each loop slept ~0.01 s for 0.3 s
    assert 0.29 <= tally.elapsed_s < 1.0
    assert tally.nbytes != os.getpid() * 6  # the pids summed are children's, not ours


def test_in_process_threads_when_one_process():
    tally = run_loops(_counting_loop, processes=1, threads=3, seconds=0.2)
    assert tally.nbytes == 3 * os.getpid()


def test_a_failing_loop_raises_its_os_error_in_the_caller(tmp_path):
    def make(index):
        return os.open(str(tmp_path / "missing"), os.O_RDONLY)

    with pytest.raises(FileNotFoundError):
        run_loops(make, processes=2, threads=1, seconds=0.1)


def test_a_continuous_run_is_cut_into_whole_windows_after_the_ramp():
    started = 100.0
    done = [100.5, 101.2, 101.4, 101.7, 102.1, 102.55]  # completion times
    latency = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    tally = Tally(len(done), 0, array("d", latency), 2.6, array("d", done), started)
    windows = in_intervals(tally, ramp_s=1.0, window_s=0.5)
    assert [list(w.latencies) for w in windows] == [[0.2, 0.3], [0.4], [0.5]]  # the ramp's and the partial window's left out
    assert [w.ops_per_s for w in windows] == [4.0, 2.0, 2.0]
