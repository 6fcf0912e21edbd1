"""The read loops run for real under ``io.parallel.run_loops``: threads, forked processes, wall-clock deadlines.

Kept apart from test_reads.py, outside the mutation run's test selection: these fork and take
tenths of a second each. test_reads.py proves the same loops' numbers in-process with a fake clock.
"""

from __future__ import annotations

import os

from preflight.checks.storage import reads
from preflight.io.parallel import in_intervals, run_loops

MiB = 1 << 20


def test_sequential_and_random_loops_read_real_bytes(tmp_path):
    name = tmp_path / "d.bin"
    name.write_bytes(os.urandom(8 * MiB))
    parts = [(str(name), 0, 8 * MiB)]
    seq = run_loops(reads.sequential_loop(reads.spans(parts, 2, MiB), "O_DIRECT", MiB), 1, 2, 0.2)
    assert seq.nbytes == seq.ops * MiB and seq.ops >= 2
    rand = run_loops(reads.random_loop(parts, "fadvise", 4096, seed=1), 2, 2, 0.2)
    assert rand.nbytes == rand.ops * 4096 == len(rand.latencies) * 4096
    assert all(0 < latency < 1 for latency in rand.latencies)


def test_the_random_loop_records_when_each_read_completed(tmp_path):
    name = tmp_path / "d.bin"
    name.write_bytes(os.urandom(MiB))
    tally = run_loops(reads.random_loop([(str(name), 0, MiB)], "O_DIRECT", 4096, seed=0), 2, 2, 0.3)
    assert len(tally.completions) == len(tally.latencies) == tally.ops > 0
    assert all(tally.started < c <= tally.started + tally.elapsed_s + 0.05 for c in tally.completions)
    windows = in_intervals(tally, ramp_s=0.1, window_s=0.05)
    assert len(windows) == int((tally.elapsed_s - 0.1) / 0.05) >= 3
    # Every read completed after the ramp and inside the whole windows lands in exactly one of them;
    # a window may be empty when a loaded runner deschedules both readers for 50 ms.
    end = tally.started + 0.1 + 0.05 * len(windows)
    inside = sum(tally.started + 0.1 <= c < end for c in tally.completions)
    assert sum(len(w.latencies) for w in windows) == inside > 0


def test_the_random_loop_reads_only_inside_its_segments(tmp_path):
    """Blocks outside the segments (a sparse file's holes) are never read: they hold a marker byte."""
    name = tmp_path / "d.bin"
    name.write_bytes(b"\xff" * MiB + os.urandom(MiB) + b"\xff" * MiB)
    parts = [(str(name), MiB, 2 * MiB)]
    picked = []
    real = os.preadv

    def spy(fd, buffers, offset):  # in-process threads only (1 process), so the spy sees every read
        picked.append(offset)
        return real(fd, buffers, offset)

    os.preadv = spy
    ops = 0
    try:
        for seed in range(50):  # windows until 100 reads were made: a loaded runner makes fewer in each (64 once)
            ops += run_loops(reads.random_loop(parts, "O_DIRECT", 4096, seed=seed), 1, 4, 0.2).ops
            if len(picked) >= 100:
                break
    finally:
        os.preadv = real
    assert ops == len(picked) >= 100
    assert all(MiB <= offset < 2 * MiB for offset in picked)


def test_a_file_gone_since_the_walk_is_skipped_and_counted(tmp_path):
    kept, gone = tmp_path / "kept.bin", tmp_path / "gone.bin"
    kept.write_bytes(os.urandom(MiB))
    parts = [(str(gone), 0, MiB), (str(kept), 0, MiB)]
    seq = run_loops(reads.sequential_loop(reads.spans(parts, 1, MiB), "O_DIRECT", MiB), 1, 1, 0.2)
    assert seq.lost == 1 and seq.nbytes >= MiB
    rand = run_loops(reads.random_loop(parts, "O_DIRECT", 4096, seed=0), 1, 2, 0.2)
    assert rand.lost == 1 and rand.ops > 0
