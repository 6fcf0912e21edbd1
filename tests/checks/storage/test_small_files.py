"""The small-files loop: which files each loop reads, in what order, one read each, and what it counts.

Loops run in this process (``factory(index)(deadline)``) against a fake clock that ticks one
second per ``perf_counter`` call, so each tally is exact.
"""

from __future__ import annotations

import os
from array import array

from preflight.checks.storage import small_files
from preflight.io.dataset_walk import DataFile
from preflight.io.parallel import Tally
from tests.helpers import Ticks


def _files(tmp_path, sizes: list[int]) -> list[DataFile]:
    files = []
    for index, size in enumerate(sizes):
        path = tmp_path / f"f{index}"
        path.write_bytes(os.urandom(size))
        files.append(DataFile(str(path), size))
    return files


def _spy(monkeypatch) -> tuple[list[str], list[int]]:
    """The names the loops open and the byte count of every read, from now on; the fake clock installed."""
    opened, reads, real_read, real_preadv = [], [], small_files.read_file, os.preadv

    def read_file(name, bypass, buffer, dataset=None):
        opened.append(os.path.basename(name))
        return real_read(name, bypass, buffer, dataset=dataset)

    def preadv(fd, buffers, offset):
        got = real_preadv(fd, buffers, offset)
        reads.append(got)
        return got

    monkeypatch.setattr(small_files, "read_file", read_file)
    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(small_files, "time", Ticks())
    return opened, reads


def test_loop_i_reads_every_loops_th_file_from_i_once_until_the_deadline(tmp_path, monkeypatch):
    """Issue 32: each file once, as the job's first epoch reads it; a second lap would be a cache's figure."""
    files = _files(tmp_path, [100, 200, 300, 400, 500])
    opened, _ = _spy(monkeypatch)
    factory = small_files.file_loop(files, 2, "O_DIRECT")
    # clock: start 1; a file read at 1, 2, 3, then its files are spent: no wrap-around
    assert factory(0)(50.0) == Tally(3, 100 + 300 + 500, array("d"), 3.0, lost=0)
    assert opened == ["f0", "f2", "f4"]
    opened.clear()
    monkeypatch.setattr(small_files, "time", Ticks())
    # clock: f1 at 1; at 2 the deadline is met
    assert factory(1)(2.0) == Tally(1, 200, array("d"), 1.0, lost=0)
    assert opened == ["f1"]


def test_a_loop_beyond_the_number_of_files_reads_none_of_them_again(tmp_path, monkeypatch):
    files = _files(tmp_path, [100, 200])
    opened, _ = _spy(monkeypatch)
    assert small_files.file_loop(files, 5, "O_DIRECT")(3)(3.0).ops == 0
    assert opened == []


def test_a_file_whose_read_fails_with_eio_is_named_and_the_others_still_read(tmp_path, monkeypatch):
    """Issue 32 case 4: an I/O error on one sample is counted and named, never the end of the measurement."""
    import errno

    files = _files(tmp_path, [100, 200, 300])
    real = small_files.read_file

    def read_file(name, bypass, buffer, dataset=None):
        if name.endswith("f1"):
            raise OSError(errno.EIO, "Input/output error", name)
        return real(name, bypass, buffer, dataset=dataset)

    monkeypatch.setattr(small_files, "read_file", read_file)
    tally = small_files.file_loop(files, 1, "O_DIRECT")(0)(1e12)
    assert (tally.ops, tally.nbytes, tally.failed) == (2, 400, (files[1].name,))


def test_each_file_is_read_whole_in_one_read_even_at_the_buffer_floor(tmp_path, monkeypatch):
    files = _files(tmp_path, [1 << 16, 5000])  # the largest file exactly the 64 KiB floor
    _, reads = _spy(monkeypatch)
    assert small_files.file_loop(files, 1, "O_DIRECT")(0)(3.0).nbytes == (1 << 16) + 5000
    assert reads == [1 << 16, 5000]


def test_a_file_gone_since_the_walk_is_dropped_and_counted_once(tmp_path, monkeypatch):
    files = _files(tmp_path, [100, 200])
    files.insert(1, DataFile(str(tmp_path / "gone"), 300))
    opened, _ = _spy(monkeypatch)
    # clock: f0 at 1, gone at 2 (dropped), f1 at 3; then the files are spent
    assert small_files.file_loop(files, 1, "O_DIRECT")(0)(50.0) == Tally(2, 100 + 200, array("d"), 3.0, lost=1)
    assert opened == ["f0", "gone", "f1"]



def test_a_loop_whose_files_are_all_gone_ends_with_them_counted(tmp_path, monkeypatch):
    files = [DataFile(str(tmp_path / "gone1"), 100), DataFile(str(tmp_path / "gone2"), 100)]
    _spy(monkeypatch)
    assert small_files.file_loop(files, 1, "O_DIRECT")(0)(100.0) == Tally(0, 0, array("d"), 2.0, lost=2)
