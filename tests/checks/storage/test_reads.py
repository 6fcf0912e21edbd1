"""Spans cover the bytes once, aligned; the loops read real data; percentiles by nearest rank, pooled.

The loops run in this process (``factory(index)(deadline)``) against a fake clock that ticks one
second per ``perf_counter`` call, so their counts, latencies and completion times are exact; the
same loops under ``io.parallel.run_loops`` (threads, forks, wall clock) are in test_reads_parallel.py.
"""

from __future__ import annotations

import os
import time
from array import array

import pytest

from preflight.checks.storage import reads
from tests.helpers import Ticks

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
    with pytest.raises(ValueError, match=r"^pooled_percentile\(\) needs at least one latency$"):
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


class Watchdog:
    """The real clock, for a loop given a 50 ms deadline; it fails the loop once 5 s have passed."""

    def __init__(self) -> None:
        self.limit = time.perf_counter() + 5.0

    def perf_counter(self) -> float:
        now = time.perf_counter()
        if now > self.limit:
            raise RuntimeError("the loop ran on past its deadline")
        return now


def _loops(tmp_path, monkeypatch, bypass):
    """Each read loop of the storage check, run in this process for a moment with ``bypass``."""
    from preflight.checks.storage import small_files
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
        monkeypatch.setattr(reads, "time", Watchdog())
        monkeypatch.setattr(small_files, "time", Watchdog())
        tally = factory(0)(time.perf_counter() + 0.05)
        assert tally.ops > 0, name
        yield name


@pytest.mark.parametrize("bypass", ["O_DIRECT", "fadvise"])
def test_every_open_of_every_read_loop_uses_the_chosen_bypass(tmp_path, monkeypatch, bypass):
    opens, advised = _spy_opens(monkeypatch, tmp_path)
    for loop in _loops(tmp_path, monkeypatch, bypass):
        assert opens, f"{loop} opened no data file"
        if bypass == "O_DIRECT":
            assert all(flags & os.O_DIRECT for _, flags in opens), f"{loop} opened a data file without O_DIRECT"
        else:
            assert not any(flags & os.O_DIRECT for _, flags in opens), loop
            dropped = {fd for fd, advice in advised if advice == os.POSIX_FADV_DONTNEED}
            assert all(fd in dropped for fd, _ in opens), f"{loop} read a data file without dropping its pages"
        opens.clear()
        advised.clear()


B = 4096  # the block of these tests: O_DIRECT's alignment


def _blocks(tmp_path, name: str, first: int, count: int) -> str:
    """A file of ``count`` blocks; block k is filled with the byte ``first + k``, so a read names its block."""
    path = tmp_path / name
    path.write_bytes(b"".join(bytes([first + k]) * B for k in range(count)))
    return str(path)


def _read_blocks(monkeypatch) -> list[int]:
    """The marker byte of every block the loops read from now on, in order; the fake clock installed.

    A loop that opens files 10000 times without reading on to its deadline fails at once.
    """
    seen, real, real_open, opens = [], os.preadv, reads.open_uncached, []

    def open_uncached(name, bypass, dataset=None):
        opens.append(name)
        if len(opens) > 10_000:
            raise RuntimeError("the loop keeps opening files without reading them")
        return real_open(name, bypass, dataset)

    def spy(fd, buffers, offset):
        got = real(fd, buffers, offset)
        seen.append(buffers[0][0])
        return got

    monkeypatch.setattr(os, "preadv", spy)
    monkeypatch.setattr(reads, "open_uncached", open_uncached)
    monkeypatch.setattr(reads, "time", Ticks())
    return seen


def _dropped(monkeypatch) -> list[tuple[int, int]]:
    """(offset, length) of every drop_cached call of the read loops."""
    calls = []
    monkeypatch.setattr(reads, "drop_cached", lambda fd, offset, length: calls.append((offset, length)))
    return calls


def test_spans_of_segments_at_an_offset_keep_their_offsets():
    parts = [("a", B, 3 * B), ("b", 2 * B, 4 * B)]
    assert reads.spans(parts, readers=2, block=B) == [[("a", B, 3 * B)], [("b", 2 * B, 4 * B)]]
    assert reads.spans(parts, readers=3, block=B) == [[("a", B, 2 * B)], [("a", 2 * B, 3 * B)], [("b", 2 * B, 4 * B)]]


def test_spans_drop_the_last_partial_block_and_the_last_reader_takes_the_rest():
    assert reads.spans([("a", 0, 5 * B // 2)], readers=1, block=B) == [[("a", 0, 2 * B)]]
    # 5 blocks over 2 readers: a share of 2 blocks, the last reader takes the 3 left
    assert reads.spans([("a", 0, 5 * B)], readers=2, block=B) == [[("a", 0, 2 * B)], [("a", 2 * B, 5 * B)]]


def test_spans_count_each_segment_once_across_three_files():
    parts = [("a", 0, B), ("b", 0, B), ("c", 0, B)]
    assert reads.spans(parts, readers=3, block=B) == [[("a", 0, B)], [("b", 0, B)], [("c", 0, B)]]


def test_a_reader_past_the_last_block_rereads_the_first():
    assert reads.spans([("a", 0, 2 * B)], readers=3, block=B) == [[("a", 0, B)], [("a", B, 2 * B)], [("a", 0, B)]]


def test_the_sequential_loop_reads_its_span_block_by_block_once_and_stops_at_its_end(tmp_path, monkeypatch):
    """Issue 32: a second read of the same bytes is a cache's figure (a FUSE client's own): no wrap-around."""
    name = _blocks(tmp_path, "a", 0, 4)
    seen = _read_blocks(monkeypatch)
    loop = reads.sequential_loop(reads.spans([(name, B, 3 * B)], 1, B), "O_DIRECT", B, once=True)(0)
    tally = loop(60.0)
    assert (tally.ops, tally.nbytes, tally.lost, tally.failed) == (2, 2 * B, 0, ())
    assert seen == [1, 2]


def test_the_sequential_loop_over_large_files_wraps_until_the_deadline(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 4)
    seen = _read_blocks(monkeypatch)
    loop = reads.sequential_loop(reads.spans([(name, B, 3 * B)], 1, B), "O_DIRECT", B)(0)
    # clock: start 1; the deadline is checked after each read at 2, 3, 4, 5, 6: the 5th read meets it
    assert loop(6.0) == reads.Tally(5, 5 * B, array("d"), 6.0, lost=0)
    assert seen == [1, 2, 1, 2, 1]


def test_the_sequential_loop_stops_at_the_deadline_within_its_span(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 4)
    seen = _read_blocks(monkeypatch)
    loop = reads.sequential_loop(reads.spans([(name, 0, 4 * B)], 1, B), "O_DIRECT", B)(0)
    # clock: start 1; the deadline is checked after each read at 2, 3: the 2nd read meets it
    assert loop(3.0) == reads.Tally(2, 2 * B, array("d"), 3.0, lost=0)
    assert seen == [0, 1]


def test_each_reader_of_a_split_reads_only_its_own_span(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 5)
    seen = _read_blocks(monkeypatch)
    factory = reads.sequential_loop(reads.spans([(name, 0, 5 * B)], 2, B), "O_DIRECT", B)
    assert factory(0)(4.0).ops == 3 and seen == [0, 1, 0]  # a share of 2 blocks
    seen.clear()
    monkeypatch.setattr(reads, "time", Ticks())
    assert factory(1)(4.0).ops == 3 and seen == [2, 3, 4]  # the last reader takes the 3 left


def test_the_sequential_loop_skips_a_file_gone_since_the_walk_and_counts_it_once(tmp_path, monkeypatch):
    kept, later = _blocks(tmp_path, "kept", 0, 1), _blocks(tmp_path, "later", 16, 1)
    parts = [(kept, 0, B), (str(tmp_path / "gone"), 0, B), (later, 0, B)]
    seen = _read_blocks(monkeypatch)
    loop = reads.sequential_loop(reads.spans(parts, 1, B), "O_DIRECT", B, once=True)(0)
    tally = loop(60.0)
    assert (tally.ops, tally.nbytes, tally.lost) == (2, 2 * B, 1)
    assert seen == [0, 16]


def test_a_sequential_loop_whose_files_are_all_gone_ends_at_once_with_them_counted(tmp_path, monkeypatch):
    parts = [(str(tmp_path / "gone1"), 0, B), (str(tmp_path / "gone2"), 0, B)]
    _read_blocks(monkeypatch)
    loop = reads.sequential_loop(reads.spans(parts, 1, B), "O_DIRECT", B)(0)
    assert loop(100.0) == reads.Tally(0, 0, array("d"), 1.0, lost=2)


def test_the_sequential_loop_drops_its_segment_from_the_cache_at_each_open_with_fadvise(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 4)
    _read_blocks(monkeypatch)
    dropped = _dropped(monkeypatch)
    reads.sequential_loop(reads.spans([(name, B, 3 * B)], 1, B), "fadvise", B)(0)(4.0)  # reads at 2, 3 | 4
    assert dropped == [(B, 2 * B), (B, 2 * B)]
    dropped.clear()
    reads.sequential_loop(reads.spans([(name, B, 3 * B)], 1, B), "O_DIRECT", B)(0)(4.0)
    assert dropped == []


def test_the_random_loop_times_each_read_and_records_when_it_completed(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 1)
    _read_blocks(monkeypatch)
    loop = reads.random_loop([(name, 0, B)], "O_DIRECT", B, seed=0)(0)
    # clock: start 1; each read is timed from 2 to 3, 4 to 5, 6 to 7; at 7 the deadline 6 is past
    assert loop(6.0) == reads.Tally(3, 3 * B, array("d", [1.0, 1.0, 1.0]), 6.0, array("d", [3.0, 5.0, 7.0]), 1.0, 0)


def test_the_random_loop_picks_every_whole_block_of_its_segments_alike_and_nothing_else(tmp_path, monkeypatch):
    a, b, c = _blocks(tmp_path, "a", 0, 3), _blocks(tmp_path, "b", 16, 4), _blocks(tmp_path, "c", 32, 1)
    parts = [(a, B, 2 * B), (b, 0, 3 * B), (c, 0, B - 1)]  # a: block 1 only; b: blocks 0-2; c: less than a block
    seen = _read_blocks(monkeypatch)
    tally = reads.random_loop(parts, "O_DIRECT", B, seed=7)(0)(801.0)  # two ticks a read: 400 reads
    assert tally.ops == len(seen) == 400 and tally.nbytes == 400 * B
    counts = {block: seen.count(block) for block in set(seen)}
    assert set(counts) == {1, 16, 17, 18}
    assert all(70 <= count <= 130 for count in counts.values()), counts  # 100 each if uniform


def test_random_loops_of_other_indexes_or_seeds_pick_other_blocks(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 64)
    seen = _read_blocks(monkeypatch)
    picks = []
    for seed, index in ((1, 0), (1, 1), (2, 0), (1, 0)):
        seen.clear()
        monkeypatch.setattr(reads, "time", Ticks())  # each loop from 0 s
        reads.random_loop([(name, 0, 64 * B)], "O_DIRECT", B, seed=seed)(index)(41.0)
        picks.append(list(seen))
    assert len(picks[0]) == 20 and picks[0] != picks[1] and picks[0] != picks[2] and picks[1] != picks[2]
    assert picks[3] == picks[0]  # a seed and an index name one sequence: a rerun reads the same blocks


def test_a_file_gone_before_the_random_loops_open_is_counted_by_the_first_loop_only(tmp_path, monkeypatch):
    kept = _blocks(tmp_path, "kept", 0, 1)
    _read_blocks(monkeypatch)
    factory = reads.random_loop([(str(tmp_path / "gone"), 0, B), (kept, 0, B)], "O_DIRECT", B, seed=0)
    first, second = factory(0), factory(1)
    assert first(0.0) == reads.Tally(0, 0, array("d"), 0.0, array("d"), 1.0, 1)
    assert second(0.0) == reads.Tally(0, 0, array("d"), 0.0, array("d"), 2.0, 0)


def test_a_random_loop_with_no_whole_block_to_read_ends_at_once(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 2)
    _read_blocks(monkeypatch)
    loop = reads.random_loop([(name, B, 2 * B - 1)], "O_DIRECT", B, seed=0)(0)  # at an offset: B - 1 bytes
    assert loop(100.0) == reads.Tally(0, 0, array("d"), 0.0, array("d"), 1.0, 0)


def test_the_random_loop_drops_each_block_it_read_from_the_cache_with_fadvise(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 8)
    seen = _read_blocks(monkeypatch)
    dropped = _dropped(monkeypatch)
    reads.random_loop([(name, 0, 8 * B)], "fadvise", B, seed=0)(0)(21.0)
    assert len(seen) == 10 and dropped == [(block * B, B) for block in seen]
    dropped.clear()
    reads.random_loop([(name, 0, 8 * B)], "O_DIRECT", B, seed=0)(0)(21.0)
    assert dropped == []


def test_shared_files_reopen_after_the_last_user_left_and_in_a_forked_child(tmp_path, monkeypatch):
    name = _blocks(tmp_path, "a", 0, 1)
    shared = reads.SharedFiles([name, str(tmp_path / "gone")], "O_DIRECT")
    fds = shared.acquire()
    assert fds[1] is None and shared.acquire() is fds and shared.users == 2
    shared.release()
    os.fstat(fds[0])  # one user left: still open
    shared.release()
    assert (shared.owner, shared.fds) == (-1, [])
    again = shared.acquire()
    assert os.fstat(again[0]).st_size == B and again[1] is None
    parent = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: parent + 1)  # what a forked child sees: the parent's state
    child = shared.acquire()
    assert child is not again and shared.users == 1 and shared.owner == parent + 1
    shared.release()
    assert shared.fds == []


def test_shared_files_open_their_own_descriptors_in_a_process_that_is_pid_1(tmp_path, monkeypatch):
    """In a container the check may run as PID 1: no real process id may read as "already opened"."""
    name = _blocks(tmp_path, "a", 0, 1)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    shared = reads.SharedFiles([name], "O_DIRECT")
    fds = shared.acquire()
    assert len(fds) == 1 and os.fstat(fds[0]).st_size == B
    shared.release()


def test_percentile_of_200_values_takes_rank_q_percent_of_200():
    values = list(range(1, 201))
    assert reads.percentile(values, 99) == 198  # rank 0.99 x 200 = 198 exactly
    assert reads.percentile(values, 100) == 200


def test_percentile_ranks_round_up_and_stay_inside_the_values():
    values = [10, 3, 7, 1, 9, 2, 8, 4, 6, 5]  # unsorted: the rank is taken in sorted order
    assert reads.percentile(values, 99) == 10  # rank ceil(9.9) = 10
    assert reads.percentile(values, 91) == 10  # rank ceil(9.1) = 10, not 9
    assert reads.percentile(values, 50) == 5  # rank 5
    assert reads.percentile(values, 0) == 1  # rank 0 is raised to 1
    assert reads.percentile(values, 100) == 10
