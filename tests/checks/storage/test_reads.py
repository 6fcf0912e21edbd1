"""Spans cover the bytes once, aligned; the loops read real data; percentiles by nearest rank, pooled."""

from __future__ import annotations

import os
import time

import pytest

from preflight.checks.storage import reads
from preflight.io.parallel import in_intervals, run_loops

MiB = 1 << 20


def test_spans_split_segments_into_contiguous_runs_of_whole_blocks():
    parts = [("a", 0, 3 * MiB), ("b", 0, 5 * MiB)]
    runs = reads.spans(parts, readers=4, block=MiB)
    assert runs == [
        [("a", 0, 2 * MiB)],
        [("a", 2 * MiB, 3 * MiB), ("b", 0, MiB)],
        [("b", MiB, 3 * MiB)],
        [("b", 3 * MiB, 5 * MiB)],
    ]


def test_more_readers_than_blocks_reread_the_first_block():
    runs = reads.spans([("a", 0, MiB)], readers=2, block=MiB)
    assert runs == [[("a", 0, MiB)], [("a", 0, MiB)]]


def test_sequential_and_random_loops_read_real_bytes(tmp_path):
    name = tmp_path / "d.bin"
    name.write_bytes(os.urandom(8 * MiB))
    parts = [(str(name), 0, 8 * MiB)]
    seq = run_loops(reads.sequential_loop(reads.spans(parts, 2, MiB), "O_DIRECT", MiB), 1, 2, 0.2)
    assert seq.nbytes == seq.ops * MiB and seq.ops >= 2
    rand = run_loops(reads.random_loop(parts, "fadvise", 4096, seed=1), 2, 2, 0.2)
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
    try:
        tally = run_loops(reads.random_loop(parts, "O_DIRECT", 4096, seed=3), 1, 4, 0.2)
    finally:
        os.preadv = real
    assert tally.ops == len(picked) > 100
    assert all(MiB <= offset < 2 * MiB for offset in picked)


def test_threads_of_one_process_share_one_descriptor_per_file(tmp_path):
    names = []
    for index in range(20):
        name = tmp_path / f"{index}.bin"
        name.write_bytes(os.urandom(64 << 10))
        names.append((str(name), 0, 64 << 10))
    before = len(os.listdir("/proc/self/fd"))
    factory = reads.random_loop(names, "O_DIRECT", 4096, seed=0)
    loops = [factory(i) for i in range(16)]
    assert len(os.listdir("/proc/self/fd")) - before == 20  # not 16 x 20
    for loop in loops:
        loop(0.0)
    assert len(os.listdir("/proc/self/fd")) == before  # the last loop out closed them


def test_a_file_gone_since_the_walk_is_skipped_and_counted(tmp_path):
    kept, gone = tmp_path / "kept.bin", tmp_path / "gone.bin"
    kept.write_bytes(os.urandom(MiB))
    parts = [(str(gone), 0, MiB), (str(kept), 0, MiB)]
    seq = run_loops(reads.sequential_loop(reads.spans(parts, 1, MiB), "O_DIRECT", MiB), 1, 1, 0.2)
    assert seq.lost == 1 and seq.nbytes >= MiB
    rand = run_loops(reads.random_loop(parts, "O_DIRECT", 4096, seed=0), 1, 2, 0.2)
    assert rand.lost == 1 and rand.ops > 0


def _spy_opens(monkeypatch, root):
    """Record (flags,) of every os.open of a file under ``root``, and the fadvise calls on them."""
    opens, advised, real_open, real_fadvise = [], [], os.open, os.posix_fadvise

    def spy_open(path, flags, *rest, **kwargs):
        fd = real_open(path, flags, *rest, **kwargs)
        if str(path).startswith(str(root)):
            opens.append((fd, flags))
        return fd

    def spy_fadvise(fd, offset, length, advice):
        advised.append((fd, advice))
        return real_fadvise(fd, offset, length, advice)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "posix_fadvise", spy_fadvise)
    return opens, advised


def _loops(tmp_path, bypass):
    """Each read loop of the storage check, run in this process for a moment with ``bypass``."""
    from preflight.checks.storage.small_files import file_loop
    from preflight.io.dataset_walk import DataFile

    names = []
    for index in range(3):
        name = tmp_path / f"d{index}.bin"
        name.write_bytes(os.urandom(MiB))
        names.append(str(name))
    parts = [(name, 0, MiB) for name in names]
    files = [DataFile(name, MiB) for name in names]
    factories = {"seq_read": reads.sequential_loop(reads.spans(parts, 1, 4096 * 16), bypass, 4096 * 16),
                 "rand_read": reads.random_loop(parts, bypass, 4096, seed=1),
                 "small_files": file_loop(files, 1, bypass)}
    for name, factory in factories.items():
        tally = factory(0)(time.perf_counter() + 0.05)
        assert tally.ops > 0, name
        yield name


@pytest.mark.parametrize("bypass", ["O_DIRECT", "fadvise"])
def test_every_open_of_every_read_loop_uses_the_chosen_bypass(tmp_path, monkeypatch, bypass):
    opens, advised = _spy_opens(monkeypatch, tmp_path)
    for loop in _loops(tmp_path, bypass):
        assert opens, f"{loop} opened no data file"
        if bypass == "O_DIRECT":
            assert all(flags & os.O_DIRECT for _, flags in opens), f"{loop} opened a data file without O_DIRECT"
        else:
            assert not any(flags & os.O_DIRECT for _, flags in opens), loop
            dropped = {fd for fd, advice in advised if advice == os.POSIX_FADV_DONTNEED}
            assert all(fd in dropped for fd, _ in opens), f"{loop} read a data file without dropping its pages"
        opens.clear()
        advised.clear()
