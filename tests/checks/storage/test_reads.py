"""Spans cover the bytes once, aligned; the loops read real data; percentiles by nearest rank, pooled."""

from __future__ import annotations

import os

import pytest

from preflight.checks.storage import reads
from preflight.checks.storage.data import DataFile
from preflight.io_parallel import in_intervals, run_loops

MiB = 1 << 20


def test_spans_split_files_into_contiguous_aligned_runs():
    files = [DataFile("a", 3 * MiB + 100), DataFile("b", 5 * MiB)]  # a's tail past the last page is unused
    runs = reads.spans(files, readers=4, block=MiB)
    assert runs == [
        [("a", 0, 2 * MiB)],
        [("a", 2 * MiB, 3 * MiB), ("b", 0, MiB)],
        [("b", MiB, 3 * MiB)],
        [("b", 3 * MiB, 5 * MiB)],
    ]


def test_more_readers_than_blocks_reread_the_first_block():
    runs = reads.spans([DataFile("a", MiB)], readers=2, block=MiB)
    assert runs == [[("a", 0, MiB)], [("a", 0, MiB)]]


def test_sequential_and_random_loops_read_real_bytes(tmp_path):
    name = tmp_path / "d.bin"
    name.write_bytes(os.urandom(8 * MiB))
    files = [DataFile(str(name), 8 * MiB)]
    seq = run_loops(reads.sequential_loop(reads.spans(files, 2, MiB), "O_DIRECT", MiB), 1, 2, 0.2)
    assert seq.nbytes == seq.ops * MiB and seq.ops >= 2
    rand = run_loops(reads.random_loop(files, "fadvise", 4096, seed=1), 2, 2, 0.2)
    assert rand.nbytes == rand.ops * 4096 == len(rand.latencies) * 4096
    assert all(0 < latency < 1 for latency in rand.latencies)


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert reads.percentile(values, 50) == 50
    assert reads.percentile(values, 99) == 99
    assert reads.percentile([7.0], 99) == 7.0


def test_pooled_percentile_sees_a_tail_that_one_window_holds():
    steady = [1.0] * 100
    burst = [1.0] * 90 + [50.0] * 10
    windows = [steady, steady, burst]
    per_window = sorted(reads.percentile(w, 99) for w in windows)
    assert per_window[1] == 1.0  # the median of per-window p99s hides the burst
    assert reads.pooled_percentile(windows, 99) == 50.0  # 10 of 300 reads are slow: p99 is slow
    assert reads.pooled_percentile(windows, 50) == 1.0


def test_pooled_percentile_of_no_latency_is_an_error():
    with pytest.raises(ValueError):
        reads.pooled_percentile([[], []], 99)


def test_the_random_loop_records_when_each_read_completed(tmp_path):
    name = tmp_path / "d.bin"
    name.write_bytes(os.urandom(MiB))
    tally = run_loops(reads.random_loop([DataFile(str(name), MiB)], "O_DIRECT", 4096, seed=0), 2, 2, 0.3)
    assert len(tally.completions) == len(tally.latencies) == tally.ops > 0
    assert all(tally.started < c <= tally.started + tally.elapsed_s + 0.05 for c in tally.completions)
    windows = in_intervals(tally, ramp_s=0.1, window_s=0.05)
    assert len(windows) == int((tally.elapsed_s - 0.1) / 0.05) >= 3
    assert all(w.ops_per_s > 0 for w in windows)
