"""Choosing data under path without writing there, and scratch space beside it."""

from __future__ import annotations

import os

from preflight.checks.storage import data
from preflight.scratch import parent_outside


def test_survey_takes_the_largest_files_and_lists_the_small_ones(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 5000)
    (tmp_path / "b").write_bytes(b"x" * 200_000)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / ".preflight-scratch-old").mkdir()
    (tmp_path / ".preflight-scratch-old" / "junk").write_bytes(b"x" * 300_000)
    found = data.survey(str(tmp_path), wanted_bytes=100_000, small_size=128 << 10, max_files=100)
    assert [os.path.basename(f.name) for f in found.large] == ["b"]
    assert [os.path.basename(f.name) for f in found.small] == ["a"]


def test_scratch_goes_beside_path_never_inside(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    parent, reason = data.scratch_parent(str(path), "", parent_outside(str(path)))
    assert parent == str(tmp_path) and reason == ""
    parent, reason = data.scratch_parent(str(path), str(tmp_path / "missing"), str(tmp_path))
    assert parent is None and "set storage.scratch_dir" in reason
    parent, reason = data.scratch_parent("/data", "", None)  # a dataset that is its own mount
    assert parent is None and "will not write: set storage.scratch_dir" in reason


def test_written_small_files_have_the_asked_size_and_distinct_bytes(tmp_path):
    files = data.write_small_files(str(tmp_path), count=130, size=1000)
    assert len(files) == 130 and all(os.path.getsize(f.name) == 1000 for f in files)
    assert len({open(f.name, "rb").read() for f in files[:64]}) == 64
    assert len(os.listdir(tmp_path / "small")) == 100
