"""Spans cover the bytes once, aligned; the loops read real data; percentiles by nearest rank, pooled."""

from __future__ import annotations

import os
import time

import pytest

from preflight.checks.storage import reads

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
