import os

import pytest

from preflight.io import scratch


def test_is_inside_resolves_links_and_dots(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    os.symlink(data / "sub", tmp_path / "link")
    assert scratch.is_inside(str(data), str(data))
    assert scratch.is_inside(str(tmp_path / "link"), str(data))
    assert scratch.is_inside(f"{tmp_path}/other/../data/sub", str(data))
    assert not scratch.is_inside(str(tmp_path / "data2"), str(data))  # a shared prefix is not containment
    assert not scratch.is_inside(str(tmp_path), str(data))


def test_parent_outside_is_the_nearest_writable_ancestor(tmp_path):
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    assert scratch.parent_outside(str(data)) == str(tmp_path / "data")
    assert scratch.parent_outside(str(tmp_path / "missing")) is None


def test_parent_outside_never_crosses_into_another_filesystem():
    # / has no parent; /proc is its own filesystem whose parent (/) is another one.
    assert scratch.parent_outside("/") is None
    assert scratch.parent_outside("/proc") is None


def test_scratch_is_refused_inside_the_protected_tree(tmp_path):
    with pytest.raises(PermissionError, match="inside the dataset path"):
        with scratch.scratch_dir(str(tmp_path), protect=str(tmp_path)):
            pass
    assert os.listdir(tmp_path) == []
