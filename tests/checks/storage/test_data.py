"""Choosing data under path without writing there: large files for streaming, data extents of sparse ones."""

from __future__ import annotations

import os

from preflight.checks.storage import data
from preflight.io.dataset_walk import DataFile

MiB = 1 << 20


def test_survey_takes_the_largest_files_of_8_mib_or_more_and_lists_the_small_ones(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 5000)
    (tmp_path / "b").write_bytes(b"x" * 200_000)  # neither small nor large: seq_read does not stream 200 kB
    (tmp_path / "c").write_bytes(os.urandom(9 * MiB))
    (tmp_path / "d").write_bytes(os.urandom(10 * MiB))
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / ".preflight-scratch-old").mkdir()
    (tmp_path / ".preflight-scratch-old" / "junk").write_bytes(b"x" * 300_000)
    found = data.survey(str(tmp_path), wanted_bytes=5 * MiB, small_size=128 << 10, max_files=100)
    assert [os.path.basename(f.name) for f in found.large] == ["d"]  # largest first, until the wanted bytes
    assert [os.path.basename(f.name) for f in found.small] == ["a"]
    assert len(found.files) == 4 and found.walk.skipped["empty"] == 1


def test_segments_are_page_aligned_and_stop_at_the_wanted_bytes(tmp_path):
    (tmp_path / "a").write_bytes(os.urandom(3 * MiB + 100))
    (tmp_path / "b").write_bytes(os.urandom(5 * MiB))
    files = [DataFile(str(tmp_path / "a"), 3 * MiB + 100), DataFile(str(tmp_path / "b"), 5 * MiB)]
    parts = data.segments(files, wanted_bytes=4 * MiB)
    assert parts == [(str(tmp_path / "a"), 0, 3 * MiB), (str(tmp_path / "b"), 0, MiB)]
    assert data.data_bytes(parts) == 4 * MiB


def test_a_sparse_file_contributes_only_its_data_extents(tmp_path):
    """Every other MiB written in a 16 MiB file made with truncate: 8 MiB of data in 8 extents."""
    name = tmp_path / "data.mdb"
    with open(name, "wb") as handle:
        handle.truncate(16 * MiB)
        for mib in range(0, 16, 2):
            handle.seek(mib * MiB)
            handle.write(os.urandom(MiB))
    found = data.survey(str(tmp_path), wanted_bytes=64 * MiB, small_size=0, max_files=10)
    assert found.large[0].maybe_sparse
    parts = data.segments(found.large, wanted_bytes=64 * MiB)
    assert parts == [(str(name), mib * MiB, (mib + 1) * MiB) for mib in range(0, 16, 2)]
